// The owner of the tests' precompiled header (test_pch.h); main is gmock_main's.
