"""Shims over private names of third-party libraries: each private name is used in one place here,
and tests/_compat/ has a test per shim that fails loudly when the library changes it."""
