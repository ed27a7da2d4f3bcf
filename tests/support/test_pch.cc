// The translation unit that builds the tests' shared precompiled header (tests/CMakeLists.txt);
// it has no code of its own.
