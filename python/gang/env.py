"""fairseq2's ``utils.env`` readers: RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE as integers, None when unset."""

import os

__all__ = [
    "EnvironmentVariableError",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_world_size",
]


class EnvironmentVariableError(ValueError):
    def __init__(self, var_name, message):
        super().__init__(message)
        self.var_name = var_name


def _get_int(env, name, minimum):
    env = os.environ if env is None else env
    value = env.get(name)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise EnvironmentVariableError(
            name, f"The value of the `{name}` environment variable is expected to be an integer, but is '{value}' instead."
        ) from None
    if n < minimum:
        raise EnvironmentVariableError(
            name, f"The value of the `{name}` environment variable is expected to be greater than or equal to {minimum}, but is {n} instead."
        )
    return n


def get_rank(env=None):
    return _get_int(env, "RANK", 0)


def get_world_size(env=None):
    return _get_int(env, "WORLD_SIZE", 1)


def get_local_rank(env=None):
    return _get_int(env, "LOCAL_RANK", 0)


def get_local_world_size(env=None):
    return _get_int(env, "LOCAL_WORLD_SIZE", 1)
