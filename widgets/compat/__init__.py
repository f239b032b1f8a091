"""Other libraries' private names, each library's in one module with a test that fails when the
library changes them (tests/compat/; docs/testing.md#other-libraries-internals).

Nothing outside a compat module names a library's private module, attribute or method: it asks
the compat module, whose functions say what they do.
"""
