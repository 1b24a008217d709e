"""Compiler flags shared by every tinyddp target."""

# Project code builds clean with these; system headers (Eigen, Catch2) come in as -isystem.
TINYDDP_COPTS = ["-Wall", "-Wextra"]
