"""``@augmentation``: turn a function of dlpipe operators into an :class:`Augmentation`."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import ArgumentError
from ._augmentation import Augmentation


def augmentation(
    function: Callable | None = None,
    *,
    mag_range=None,
    randomly_negate: bool | None = None,
    mag_to_param: Callable | None = None,
    param_device: str | None = None,
    name: str | None = None,
    augmentation_cls: type[Augmentation] | None = None,
):
    """Make an augmentation the automatic augmentations (AutoAugment, RandAugment,
    TrivialAugment) can use.

    The function takes at least two positional arguments, the batch (a DataNode) and the
    parameter, and returns the transformed batch. Called as an augmentation it takes
    ``magnitude_bin`` and ``num_magnitude_bins`` instead of the parameter, which is
    ``mag_to_param(magnitudes[magnitude_bin] * (-1) ** random_sign)`` with
    ``magnitudes = linspace(mag_range[0], mag_range[1], num_magnitude_bins)``.

    Args:
        function: the function (when used without arguments: ``@augmentation``).
        mag_range: (low, high), or an array of the magnitudes; None: the function's
            parameter is None.
        randomly_negate: negate the magnitude for a random half of the samples.
        mag_to_param: magnitude -> parameter (numpy-convertible, same shape and type for
            every magnitude); all parameters are computed when the graph is built.
        param_device: where the parameters live: "cpu" (default), "gpu" or "auto" (the
            data's device).
        name: the augmentation's name (default: the function's).
        augmentation_cls: the class to make (default :class:`Augmentation`).

    Raises:
        ArgumentError: the object is not callable, or is an augmentation already.

    Example:
        >>> @augmentation(mag_range=(0, 30), randomly_negate=True)
        ... def my_rotate(data, angle, fill_value=128):
        ...     return fn.rotate(data, angle=angle, fill_value=fill_value, keep_size=True)
    """

    def decorator(function):
        cls = augmentation_cls or Augmentation
        return cls(
            function,
            mag_range=mag_range,
            mag_to_param=mag_to_param,
            randomly_negate=randomly_negate,
            param_device=param_device,
            name=name,
        )

    if function is None:
        return decorator
    if isinstance(function, Augmentation):
        raise ArgumentError(
            "The `@augmentation` was applied to already decorated Augmentation. Please call "
            f"`{function.name}.augmentation` method to modify the augmentation setup or apply "
            f"the decorator to the underlying `{function.name}.op` directly.\n"
            f"Error in augmentation: {function}."
        )
    if not callable(function):
        raise ArgumentError(
            "The `@augmentation` decorator was used to decorate the object that is not "
            f"callable: {function}."
        )
    return decorator(function)
