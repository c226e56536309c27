"""Small shims over private names of other libraries, each with a test that fails when the private changes."""
