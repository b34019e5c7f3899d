// test_headers.cpp — the translation unit that owns the unit tests' precompiled headers.
//
// Build support, not a test: CMake precompiles the headers it lists for
// this object library (CMakeLists.txt, target_precompile_headers), and
// every tests/unit/ and tests/hidden/ file reuses that one precompiled
// header. Nothing is defined here.
