"""Side by side with NVIDIA DALI: the speech pipelines of DeepLearningExamples' Jasper and of
NeMo, run as their files are written (only the imports changed), through their own loaders.

    python3 ci/bench_dali_speech.py --examples .ext [--only jasper-train,jasper-val]
        [--images 3000] [--data /tmp/dlpipe-bench/speech] [--rounds 2]

The files, from NVIDIA/DeepLearningExamples ``PyTorch/SpeechRecognition/Jasper/common/dali/``,
are read from ``--examples`` (not part of this repository):

* ``dle_jasper_pipeline.py`` (``pipeline.py``: ``DaliPipeline.from_config``),
* ``dle_jasper_iterator.py`` (``iterator.py``: ``DaliJasperIterator``, which wraps
  ``DALIGenericIterator`` and hands out padded features with their lengths, and the padded
  transcripts with theirs),
* ``dle_jasper_data_loader.py`` (``data_loader.py``: ``DaliDataLoader``, which reads the
  manifest, writes the file list and builds the two above).

For dlpipe every import of those files is rewritten (``nvidia.dali`` -> ``dlpipe``, the
iterator's imports inside ``__init__`` included). The configuration is what DLE's
``jasper/config.py`` makes of ``configs/jasper10x5dr_speedp-online_speca.yaml`` (train:
speed perturbation 0.85-1.15, silence trimming at -60 dB, dither 1e-5, SpecAugment with 2
frequency and 2 time masks; val: no perturbation, no masks), with the batch of
``scripts/train.sh`` (64 over 2 accumulation steps: 32) and DLE's threads (all cores).
DLE's transcript cleaners (``common/text``, which need ``inflect``) are replaced by a stand-in
that gives the same text on the generated transcripts (lowercase letters, spaces, punctuation).

Cells (rates are utterances/s):

* ``jasper-train`` / ``jasper-val``: ``--dali_device gpu`` as DLE trains (decode, resampling
  and trimming on the CPU, the features on the GPU);
* ``jasper-train-cpuprep`` / ``jasper-val-cpuprep``: ``--dali_device cpu`` (every operator on
  the CPU, the outputs copied to the GPU);
* ``jasper-train-host`` / ``jasper-val-host``: the same as ``-cpuprep`` on a machine without a
  GPU (``device_id=None``): the pipeline's last ``.gpu()`` copies and the iterator's
  ``.cuda()`` calls become no-ops in the child; on the first 320 files;
* ``nemo-train`` / ``nemo-val`` (``-host``: ``device="cpu"``, on the first 320 files): NeMo's
  ``AudioToCharDALIDataset`` (``nemo/collections/asr/data/audio_to_text_dali.py``, read from
  ``--examples``/``nemo_audio_to_text_dali.py``) as ``get_dali_char_dataset`` builds it from
  QuartzNet15x5's ``train_ds`` (trimmed, shuffled, <= 16.7 s) and ``validation_ds``, with its
  mel preprocessor (on the GPU when there is one, as NeMo does; NeMo's 4 threads). NeMo and
  omegaconf are not needed: the few names the file imports from them are stand-ins here
  (the manifest's transcripts, a character parser, a dict for the DictConfig).
* ``rnnt-train`` (``-host``: without a GPU): DALI's RNN-T example (``docs/examples/use_cases/
  pytorch/rnn-t/dali.py``, read from ``--examples``/``dali_rnnt_dali.py``): its
  ``DaliDataLayer`` with its defaults (a ``DaliTrainPipeline`` of CPU operators, one thread,
  synchronous, speed perturbation 0.9-1.1, frame splicing; the outputs copied to the GPU) and
  ``DaliRnntIterator``, batch 8 (``scripts/train_dali.sh``), over the first 400 utterances.
  The file uses ``nvidia.dali`` in its code too (``nvidia.dali.pipeline.Pipeline``): for
  dlpipe every ``nvidia.dali`` in it becomes ``dlpipe``, as a user's search-and-replace would.

``--libs "dali,dlpipe,dali+DLPIPE_BENCH_BARE=1,dlpipe+DLPIPE_BENCH_BARE=1"`` adds each library's
pipeline alone: the Jasper and NeMo cells then iterate the examples' inner
``DALIGenericIterator`` and leave out their transcript processing (``_bare_use``).

The data (``prepare``): ``--images`` speech-like 16 kHz mono WAVs of 1-16 s (a voice-like
harmonic tone with a wandering pitch and a syllable rhythm, noise, near-silence at both ends),
written by all cores, with a DLE manifest (``original_duration``, ``files[-1].fname``,
``transcript``) and a NeMo one (``audio_filepath``, ``duration``, ``text``).
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import re
import string
import sys
import tempfile
import types as pytypes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dali  # noqa: E402

SR = 16000
BATCH = 32  # scripts/train.sh: BATCH_SIZE=64, GRAD_ACCUMULATION_STEPS=2
GRAD_ACCUMULATION = 2
HOST_FILES = 320  # the host cells read the first 320 utterances (10 batches)

# configs/jasper10x5dr_speedp-online_speca.yaml
LABELS = [" ", *"abcdefghijklmnopqrstuvwxyz", "'"]
SYMBOLS = LABELS + ["<BLANK>"]  # common/helpers.add_ctc_blank

# name -> (train, DLE's --dali_device; "host": cpu without a GPU)
CELLS = {
    "jasper-train": (True, "gpu"),
    "jasper-val": (False, "gpu"),
    "jasper-train-cpuprep": (True, "cpu"),
    "jasper-val-cpuprep": (False, "cpu"),
    "jasper-train-host": (True, "host"),
    "jasper-val-host": (False, "host"),
    "nemo-train": (True, "gpu"),
    "nemo-val": (False, "gpu"),
    "nemo-train-host": (True, "host"),
    "nemo-val-host": (False, "host"),
    "rnnt-train": (True, "gpu"),
    "rnnt-train-host": (True, "host"),
}
RNNT_BATCH = 8  # rnn-t/scripts/train_dali.sh: BATCH_SIZE=8
RNNT_FILES = 400  # the RNN-T cells' manifest: the first 400 utterances (50 batches)
DEFAULTS = {"--data": "/tmp/dlpipe-bench/speech", "--images": "3000", "--examples": ".ext"}


# --- DLE's configuration, as jasper/config.input(cfg, split) fills it -------------------------


def jasper_config(split: str) -> tuple[dict, dict]:
    """(config_data, config_features) of DLE's default Jasper config for ``split``: the YAML's
    ``input_<split>`` with the defaults of ``AudioDataset`` / ``FilterbankFeatures`` /
    ``SpeedPerturbation`` / ``SpecAugment`` filled in, as ``config.validate_and_fill`` does."""
    train = split == "train"
    data = {
        "sample_rate": SR,
        "min_duration": 0.1,
        "max_duration": 16.7 if train else float("inf"),
        "pad_to_max_duration": False,
        "max_utts": 0,
        "normalize_transcripts": True,
        "sort_by_duration": False,
        "trim_silence": True,
        "speed_perturbation": None,
        "gain_perturbation": None,
        "shift_perturbation": None,
        "ignore_offline_speed_perturbation": train,
    }
    features = {
        "spec_augment": None,
        "cutout_augment": None,
        "sample_rate": SR,
        "window_size": 0.02,
        "window_stride": 0.01,
        "window": "hann",
        "normalize": "per_feature",
        "n_fft": 512,
        "preemph": 0.97,
        "n_filt": 64,
        "lowfreq": 0,
        "highfreq": None,
        "log": True,
        "dither": 0.00001,
        "pad_align": 16,
        "pad_to_max_duration": False,
        "max_duration": 16.7 if train else float("inf"),
        "frame_splicing": 1,
    }
    if train:
        data["speed_perturbation"] = {
            "min_rate": 0.85,
            "max_rate": 1.15,
            "discrete": False,
            "p": 0.1,
        }
        features["spec_augment"] = {
            "freq_masks": 2,
            "min_freq": 0,
            "max_freq": 20,
            "time_masks": 2,
            "min_time": 0,
            "max_time": 75,
        }
    return data, features


# --- stand-ins for DLE's common/ helpers the loaded files import --------------------------------


def punctuation_map(labels):
    """common/text.punctuation_map: punctuation outside ``labels`` (but + and &) to spaces."""
    punct = string.punctuation.replace("+", "").replace("&", "")
    for label in labels:
        punct = punct.replace(label, "")
    return str.maketrans(punct, " " * len(punct))


def clean_text(text, cleaner_names, table=None):
    """common/text._clean_text with ``english_cleaners`` on ASCII text without numbers or
    abbreviations (what the generated transcripts hold): lowercase, punctuation removed,
    whitespace collapsed."""
    assert list(cleaner_names) == ["english_cleaners"], cleaner_names
    text = text.lower()
    if table is not None:
        text = text.translate(table).replace("&", " and ").replace("+", " plus ")
    return re.sub(r"\s+", " ", text)


def print_once(msg):
    print(msg)


# --- loading DLE's files -------------------------------------------------------------------------


def load_ported(path: str, names: list[str], lib: str) -> dict:
    """``bench_dali.load_defs`` of ``path``; for dlpipe every import is ported first, those
    inside functions too (``DaliJasperIterator.__init__`` imports the PyTorch plugin there)."""
    if lib == "dlpipe":
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                node.module = bench_dali._port(node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    alias.name = bench_dali._port(alias.name)
        folder = tempfile.mkdtemp(prefix="dlpipe-bench-speech-")
        path = os.path.join(folder, os.path.basename(path))
        with open(path, "w") as f:
            f.write(ast.unparse(tree) + "\n")
    return bench_dali.load_defs(path, names, lib)


def dle_loader_class(examples: str, lib: str, made: list):
    """DLE's ``DaliDataLoader`` wired to DLE's ``DaliPipeline`` and ``DaliJasperIterator`` (as
    its package imports do); every pipeline it makes is appended to ``made``."""
    pipe_ns = load_ported(os.path.join(examples, "dle_jasper_pipeline.py"), ["DaliPipeline"], lib)
    iter_ns = load_ported(
        os.path.join(examples, "dle_jasper_iterator.py"),
        ["DaliJasperIterator", "normalize_string"],
        lib,
    )
    iter_ns.update(print_once=print_once, _clean_text=clean_text, punctuation_map=punctuation_map)
    loader_ns = load_ported(
        os.path.join(examples, "dle_jasper_data_loader.py"),
        ["DaliDataLoader", "_parse_json", "_dict_to_file"],
        lib,
    )
    pipeline_cls = pipe_ns["DaliPipeline"]

    def from_config(**kw):
        made.append(pipeline_cls.from_config(**kw))
        return made[-1]

    loader_ns.update(
        DaliPipeline=pytypes.SimpleNamespace(from_config=from_config),
        DaliJasperIterator=iter_ns["DaliJasperIterator"],
        print_once=print_once,
    )
    return loader_ns["DaliDataLoader"]


def _without_gpu(lib: str) -> None:
    """The host cells: DLE's last ``.gpu()`` copies and its iterator's ``.cuda()`` as no-ops."""
    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self
    if lib == "dali":
        from nvidia.dali.data_node import DataNode
    else:
        from dlpipe.graph import DataNode
    DataNode.gpu = lambda self, *a, **k: self


# --- the child -----------------------------------------------------------------------------------


def child(args) -> None:
    """One cell on one library: DLE's DaliDataLoader over the manifest, whole epochs."""
    if args.cell.startswith("nemo"):
        return nemo_child(args)
    if args.cell.startswith("rnnt"):
        return rnnt_child(args)
    train, device = CELLS[args.cell]
    host = device == "host"
    if host:
        _without_gpu(args.lib)
    made: list = []
    loader_cls = dle_loader_class(args.examples, args.lib, made)
    split = "train" if train else "val"
    config_data, config_features = jasper_config(split)
    manifest = f"{split}-manifest{'-host' if host else ''}.json"
    loader = loader_cls(
        gpu_id=None if host else args.rank,
        dataset_path=args.data,
        config_data=config_data,
        config_features=config_features,
        json_names=[manifest],
        symbols=SYMBOLS,
        batch_size=BATCH,
        pipeline_type=split,
        grad_accumulation_steps=GRAD_ACCUMULATION if train else 1,
        device_type="gpu" if device == "gpu" else "cpu",
    )

    def use(batch):
        feats, feat_lens, txt, txt_lens = batch  # as train.py unpacks it
        value = feats[:, :, 0].sum() + feat_lens.sum() + txt_lens.sum() + txt[:, 0].sum()
        return feats.shape[0], value

    # `for batch in loader` (train.py): iter(loader) is the auto-resetting DaliJasperIterator,
    # so every pass is one epoch
    it = loader
    if os.environ.get("DLPIPE_BENCH_BARE"):  # the pipeline alone: its own iterator, no text
        it, use = iter(loader).dali_it, _bare_use("audio", "audio_shape")
    bench_dali.measure(args, made[0], it, use, BATCH, on_gpu=not host)


def _bare_use(features: str, lengths: str):
    """``use`` for a ``DALIGenericIterator``'s batches (``DLPIPE_BENCH_BARE``): the loop takes
    the features and lengths and does nothing else, so the cell measures the pipeline and its
    iterator without the example's text processing (what a pipeline in a process of its own
    could at best give the training loop)."""

    def use(batch):
        feats, lens = batch[0][features], batch[0][lengths]
        return feats.shape[0], feats[:, :, 0].sum() + lens.sum()

    return use


# --- DALI's RNN-T example: docs/examples/use_cases/pytorch/rnn-t/dali.py -------------------------

RNNT_DEFS = [
    "print_dict",
    "gen_filelist",
    "dict_to_file",
    "DaliTrainPipeline",
    "DaliRnntIterator",
    "DaliDataLayer",
]


class _RnntEpochs:
    """One epoch of ``DaliRnntIterator`` per ``iter()``: train.py loops over it until
    StopIteration; its ``DALIGenericIterator`` (no ``auto_reset``) is reset after each."""

    def __init__(self, it):
        self.it = it

    def __iter__(self):
        while True:
            try:
                batch = next(self.it)
            except StopIteration:
                self.it.dali_it.reset()
                return
            yield batch


def rnnt_child(args) -> None:
    train, device = CELLS[args.cell]
    host = device == "host"
    if host:
        _without_gpu(args.lib)
    with open(os.path.join(args.examples, "dali_rnnt_dali.py")) as f:
        text = f.read()
    if args.lib == "dlpipe":
        text = text.replace("nvidia.dali.plugin", "dlpipe.plugins").replace("nvidia.dali", "dlpipe")
    if host:  # no GPU to pick: the pipeline's device_id is None
        old = "__init__(batch_size, num_threads, device_id,"
        if old not in text:
            raise RuntimeError(f"dali_rnnt_dali.py: {old!r} not found; the host cell needs it")
        text = text.replace(old, "__init__(batch_size, num_threads, None,")
    path = os.path.join(tempfile.mkdtemp(prefix="dlpipe-bench-rnnt-"), "dali_rnnt_dali.py")
    with open(path, "w") as f:
        f.write(text)
    ns = bench_dali.load_defs(path, RNNT_DEFS, args.lib)
    layer = ns["DaliDataLayer"](
        dataset_path=args.data, json_name="rnnt-manifest.json", batch_size=RNNT_BATCH, ngpus=1
    )
    it = layer.data_iterator

    def use(batch):
        audio, audio_len, txt, txt_lens = batch  # train.py's unpacking
        value = audio[:, 0, 0].sum() + audio_len.sum() + txt_lens.sum() + txt[:, 0].sum()
        return audio.shape[0], value

    bench_dali.measure(
        args, it.dali_it._pipes[0], _RnntEpochs(it), use, RNNT_BATCH, on_gpu=not host
    )


# --- NeMo: nemo/collections/asr/data/audio_to_text_dali.py ---------------------------------------

# QuartzNet15x5's model.preprocessor (examples/asr/conf/quartznet/quartznet_15x5.yaml)
NEMO_PREPROCESSOR = {
    "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
    "normalize": "per_feature",
    "window_size": 0.02,
    "sample_rate": SR,
    "window_stride": 0.01,
    "window": "hann",
    "features": 64,
    "n_fft": 512,
    "frame_splicing": 1,
    "dither": 0.00001,
}


class NemoConfig(dict):
    """A stand-in for omegaconf's DictConfig: keys read as items or attributes."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class ManifestProcessor:
    """A stand-in for NeMo's ``ASRManifestProcessor`` as the DALI dataset uses it: the
    manifests' transcripts, filtered by duration as NeMo's ``ASRAudioText`` collection does and
    tokenized once (``process_text_by_id`` -> (tokens, length))."""

    def __init__(
        self,
        manifest_filepath,
        parser,
        max_duration=None,
        min_duration=None,
        max_utts=0,
        bos_id=None,
        eos_id=None,
        pad_id=0,
        index_by_file_id=False,
    ):
        assert not index_by_file_id and not max_utts
        self.parser, self.bos_id, self.eos_id, self.pad_id = parser, bos_id, eos_id, pad_id
        self.tokens = []
        for path in manifest_filepath.split(","):
            with open(path) as f:
                for line in f:
                    item = json.loads(line)
                    if min_duration is not None and item["duration"] < min_duration:
                        continue
                    if max_duration is not None and item["duration"] > max_duration:
                        continue
                    self.tokens.append(parser(item["text"]))

    def process_text_by_id(self, index):
        t = list(self.tokens[index])
        if self.bos_id is not None:
            t = [self.bos_id] + t
        if self.eos_id is not None:
            t = t + [self.eos_id]
        return t, len(t)


def make_parser(labels, name="en", unk_id=-1, blank_id=-1, do_normalize=True):
    """A stand-in for NeMo's character parser on the generated (ASCII, digit-free) text:
    lowercased, each character in ``labels`` to its index, the others dropped."""
    ids = {c: i for i, c in enumerate(labels)}

    def parse(text):
        text = clean_text(text, ["english_cleaners"], punctuation_map(labels))
        return [ids[c] for c in text.strip() if c in ids]

    return parse


def _nemo_stubs() -> None:
    """Modules NeMo's file imports besides DALI (NeMo itself, omegaconf), as stand-ins."""

    def module(name, **attrs):
        m = pytypes.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    info = pytypes.SimpleNamespace(info=lambda *a, **k: None, warning=print)
    module("nemo")
    module("nemo.utils", logging=info, model_utils=pytypes.SimpleNamespace())
    module("nemo.collections")
    module("nemo.collections.asr")
    module("nemo.collections.asr.data")
    module(
        "nemo.collections.asr.data.audio_to_text",
        ASRManifestProcessor=ManifestProcessor,
        expand_sharded_filepaths=None,
    )
    module("nemo.collections.common")
    module("nemo.collections.common.parts")
    parsers = module("nemo.collections.common.parts.preprocessing.parsers", make_parser=make_parser)
    module("nemo.collections.common.parts.preprocessing", parsers=parsers)
    try:
        import omegaconf  # noqa: F401
    except ImportError:
        module("omegaconf", DictConfig=NemoConfig)


def nemo_child(args) -> None:
    """NeMo's ``AudioToCharDALIDataset`` as ``get_dali_char_dataset`` makes it from
    QuartzNet15x5's ``train_ds`` / ``validation_ds``, iterated as NeMo's training loop does."""
    train, device = CELLS[args.cell]
    host = device == "host"
    _nemo_stubs()
    ns = load_ported(
        os.path.join(args.examples, "nemo_audio_to_text_dali.py"),
        ["DALIOutputs", "_AudioTextDALIDataset", "AudioToCharDALIDataset"],
        args.lib,
    )
    ns["HAVE_DALI"] = True  # set in the file's try: import nvidia.dali
    manifest = os.path.join(args.data, f"nemo-manifest{'-host' if host else ''}.json")
    # get_dali_char_dataset(config, shuffle=config['shuffle'], ...): the config's keys, the
    # .get() defaults for the others; device 'gpu' when torch.cuda.is_available()
    ds = ns["AudioToCharDALIDataset"](
        manifest_filepath=manifest,
        device="cpu" if host else "gpu",
        batch_size=BATCH,
        labels=LABELS,
        sample_rate=SR,
        audio_tar_filepaths=None,
        audio_tar_index_filepaths=None,
        max_duration=16.7 if train else None,
        min_duration=None,
        blank_index=-1,
        unk_index=-1,
        normalize=False,
        trim=train,  # train_ds: trim_silence: True
        parser="en",
        shuffle=train,
        shard_strategy="scatter",
        device_id=args.rank,
        global_rank=0,
        world_size=1,
        preprocessor_cfg=NemoConfig(NEMO_PREPROCESSOR),
        return_sample_id=False,
    )

    def use(batch):
        signal, signal_len, transcript, transcript_len = (batch[i] for i in range(4))
        value = signal[:, :, 0].sum() + signal_len.sum() + int(transcript_len.sum())
        return signal.shape[0], value

    it = ds
    if os.environ.get("DLPIPE_BENCH_BARE"):  # the pipeline alone (see _bare_use)
        it, use = ds._iter, _bare_use("processed_signal", "processed_signal_len")
    bench_dali.measure(args, ds.pipe, it, use, BATCH, on_gpu=not host)


# --- the data ------------------------------------------------------------------------------------

WORDS = (
    "the of and to in he was that it his her with as had for she not but at on by you be which "
    "him all have from they were this my so one said me we there when an are their no would who "
    "could been what into more them man then out do if some upon time now about your like over "
    "little can should only very before any great did down well such know never good came old "
    "don't i'm it's mister house through again after made eyes things might thought away every"
).split()


def _utterance(i: int) -> tuple[float, str]:
    """Speech-like int16 samples of utterance ``i`` (seeded by ``i``) and a transcript."""
    import numpy as np

    rng = np.random.default_rng(1234 + i)
    seconds = float(rng.uniform(1.0, 16.0))
    n = int(seconds * SR)
    lead, trail = (int(rng.uniform(0.1, 0.5) * SR) for _ in range(2))
    m = max(n - lead - trail, SR // 2)
    t = np.arange(m) / SR
    # the pitch wanders around a speaker's base frequency (intonation + jitter)
    base = rng.uniform(90.0, 240.0)
    drift = np.cumsum(rng.normal(0, 0.002, m))
    f0 = base * (1 + 0.12 * np.sin(2 * np.pi * rng.uniform(0.2, 0.7) * t) + drift - drift.mean())
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voice = sum(np.sin(k * phase + rng.uniform(0, 6.3)) / k for k in range(1, 7))
    syllables = np.sin(np.pi * rng.uniform(3.0, 5.0) * t + rng.uniform(0, 3.1)) ** 2
    x = voice * syllables * rng.uniform(0.15, 0.3) + rng.normal(0, 0.01, m)
    quiet = rng.normal(0, 1e-4, lead + trail + m)  # near-silence (-80 dB) at both ends
    quiet[lead : lead + m] += x
    pcm = np.clip(np.round(quiet * 32767), -32768, 32767).astype(np.int16)
    words = rng.choice(WORDS, max(1, int(len(pcm) / SR * 2.5)))
    text = " ".join(words).capitalize() + rng.choice([".", "?", "!", ","])
    return pcm, text


def _write(job) -> dict:
    root, i = job
    pcm, text = _utterance(i)
    name = f"wav/utt{i:05d}.wav"
    path = os.path.join(root, name)
    try:
        import soundfile

        soundfile.write(path, pcm, SR, subtype="PCM_16")
    except ImportError:  # the same file through the standard library
        import wave

        with wave.open(path, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SR)
            w.writeframes(pcm.tobytes())
    return {"name": name, "samples": len(pcm), "text": text}


def prepare(args) -> None:
    """``--images`` utterances under ``--data`` (all cores), with DLE's and NeMo's manifests."""
    root, count = args.data, args.images
    done = os.path.join(root, f".complete-{count}")
    if os.path.exists(done):
        return _rnnt_manifest(root)
    os.makedirs(os.path.join(root, "wav"), exist_ok=True)
    with multiprocessing.Pool(os.cpu_count()) as pool:
        utts = pool.map(_write, [(root, i) for i in range(count)], chunksize=8)
    dle = [
        {
            "transcript": u["text"],
            "files": [
                {
                    "channels": 1,
                    "sample_rate": float(SR),
                    "bitrate": 16,
                    "duration": u["samples"] / SR,
                    "num_samples": u["samples"],
                    "encoding": "Signed Integer PCM",
                    "silent": False,
                    "fname": u["name"],
                    "speed": 1,
                }
            ],
            "original_duration": u["samples"] / SR,
            "original_num_samples": u["samples"],
        }
        for u in utts
    ]
    for split in ("train", "val"):
        with open(os.path.join(root, f"{split}-manifest.json"), "w") as f:
            json.dump(dle, f)
        with open(os.path.join(root, f"{split}-manifest-host.json"), "w") as f:
            json.dump(dle[:HOST_FILES], f)
    nemo = [
        {
            "audio_filepath": os.path.join(root, u["name"]),
            "duration": u["samples"] / SR,
            "text": u["text"],
        }
        for u in utts
    ]
    for name, items in (("nemo-manifest", nemo), ("nemo-manifest-host", nemo[:HOST_FILES])):
        with open(os.path.join(root, f"{name}.json"), "w") as f:
            f.writelines(json.dumps(item) + "\n" for item in items)
    _rnnt_manifest(root)
    hours = sum(u["samples"] for u in utts) / SR / 3600
    print(f"speech data: {count} utterances, {hours:.2f} h, in {root}", flush=True)
    open(done, "w").close()


def _rnnt_manifest(root: str) -> None:
    """The RNN-T cells' manifest (DLE's format, which the example reads too): the first
    ``RNNT_FILES`` utterances of the training manifest."""
    with open(os.path.join(root, "train-manifest.json")) as f:
        items = json.load(f)[:RNNT_FILES]
    with open(os.path.join(root, "rnnt-manifest.json"), "w") as f:
        json.dump(items, f)


SUITE = bench_dali.Suite(
    script=__file__,
    cells=list(CELLS),
    child=child,
    prepare=prepare,
    description=__doc__.split("\n")[0],
    single_gpu_cells=frozenset(CELLS),  # DLE takes its shard from torch.distributed
)


def _with_defaults(argv: list[str]) -> list[str]:
    """This script's defaults for the harness's --data / --images / --examples."""
    out = list(argv)
    for key, value in DEFAULTS.items():
        if not any(a == key or a.startswith(key + "=") for a in argv):
            out += [key, value]
    return out


if __name__ == "__main__":
    sys.argv = _with_defaults(sys.argv)
    bench_dali.main(SUITE)
