"""Everything tinyddp needs from outside its own tree, declared offline: load and call once.

A workspace that uses tinyddp (docs/using.md):

    local_repository(name = "tinyddp", path = "/path/to/tinyddp")
    load("@tinyddp//:repositories.bzl", "tinyddp_dependencies")
    tinyddp_dependencies()

tinyddp's own WORKSPACE makes the same call. Each repository is declared only if the
workspace has not declared one of that name already, so calling this twice, or after your own
@eigen, changes nothing. Repositories are fetched lazily: @cuda (/usr/local/cuda) is touched
only by builds with --define=cuda=1, @catch2 only by tinyddp's tests.
"""

# The directory of tinyddp's stand-ins for Bazel's rule repositories (third_party/<name>/).
_THIRD_PARTY_BUILD = Label("//third_party:BUILD")

def _stand_in_impl(ctx):
    """Links every entry of third_party/<attr.src>/ (files and folders) into the repository."""
    source = ctx.path(_THIRD_PARTY_BUILD).dirname.get_child(ctx.attr.src)
    for entry in source.readdir():
        ctx.symlink(entry, entry.basename)

# Bazel 4 would download rules_cc, rules_java and (for `bazel test`) remote_coverage_tools;
# these repositories give it tinyddp's tiny stand-ins instead (see third_party/).
_stand_in = repository_rule(
    implementation = _stand_in_impl,
    attrs = {"src": attr.string(mandatory = True)},
    local = True,
)

def _declare(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def tinyddp_dependencies():
    """Declares the repositories tinyddp builds against; idempotent, offline."""
    for name in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        _declare(_stand_in, name, src = name)

    # Debian's bazel-platforms (for @platforms//:incompatible).
    _declare(native.local_repository, "platforms", path = "/usr/share/bazel/tools/platforms")

    # System libraries from Debian packages: headers here, link flags in //third_party:BUILD.
    _declare(
        native.new_local_repository,
        "eigen",
        path = "/usr/include/eigen3",
        build_file = str(Label("//third_party:eigen.BUILD")),
    )
    _declare(
        native.new_local_repository,
        "catch2",
        path = "/usr/include/catch2",
        build_file = str(Label("//third_party:catch2.BUILD")),
    )

    # The CUDA toolkit (not a Debian package). Only referenced inside select() on
    # //third_party/cuda:enabled, so a machine without /usr/local/cuda never loads it.
    _declare(
        native.new_local_repository,
        "cuda",
        path = "/usr/local/cuda",
        build_file = str(Label("//third_party/cuda:cuda.BUILD")),
    )
