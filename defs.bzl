"""Compiler flags shared by every tinyddp target.

They travel with the targets, not with a .bazelrc, so that tinyddp builds the same from its
own workspace and from a user's (where Bazel never reads tinyddp's .bazelrc).
"""

TINYDDP_COPTS = [
    "-std=c++20",
    # Portable AVX2+FMA code: runs on any x86-64-v3 host, the GPU machines included.
    "-march=x86-64-v3",
    # Project code builds clean with these; system headers (Eigen, Catch2) come in as -isystem.
    "-Wall",
    "-Wextra",
    # gcc 12 false positives inside Eigen.
    "-Wno-maybe-uninitialized",
]

# The flag a target needs to include tinyddp's headers: Bazel's default toolchain compiles C++
# as -std=c++0x, and copts do not pass from a library to the targets that depend on it. The
# headers also compile as C++17 (examples/downstream checks both).
TINYDDP_USER_COPTS = ["-std=c++20"]

def tinyddp_cc_binary(name, copts = [], **kwargs):
    """A cc_binary whose sources include tinyddp's headers (adds TINYDDP_USER_COPTS)."""
    native.cc_binary(name = name, copts = TINYDDP_USER_COPTS + copts, **kwargs)

def tinyddp_cc_library(name, copts = [], **kwargs):
    """A cc_library whose sources include tinyddp's headers (adds TINYDDP_USER_COPTS)."""
    native.cc_library(name = name, copts = TINYDDP_USER_COPTS + copts, **kwargs)

def tinyddp_cc_test(name, copts = [], **kwargs):
    """A cc_test whose sources include tinyddp's headers (adds TINYDDP_USER_COPTS)."""
    native.cc_test(name = name, copts = TINYDDP_USER_COPTS + copts, **kwargs)
