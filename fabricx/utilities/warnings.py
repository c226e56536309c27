"""Warning categories fabricx emits."""


class PossibleUserWarning(UserWarning):
    """A setting that is allowed but probably not what the user meant."""
