"""Audio arithmetic below the operator packages: reading audio files (``io``) and DALI's
windowed-sinc resampler (``resampling``), shared by ``decoders.audio``, ``readers.nemo_asr`` and
``fn.audio_resample``."""
