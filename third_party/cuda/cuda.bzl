"""CUDA helpers for --config=cuda.

if_cuda(a, b) picks `a` under --config=cuda and `b` otherwise. cuda_objects() compiles .cu
files with nvcc into .pic.o objects that a cc_library lists in its srcs. Every reference to
@cuda sits inside a select(), so the default build never loads the toolkit repository.
"""

CUDA_PATH = "/usr/local/cuda"

# Resolved against this file's repository, so that the macros work the same when tinyddp is
# an external repository of a user's workspace (where "//..." would mean the user's).
_ENABLED = str(Label("//third_party/cuda:enabled"))
_NO_PTX = str(Label("//third_party/cuda:no_ptx"))

# Where tinyddp's sources sit in the execution root: "" in its own workspace,
# "external/<name>" in a user's.
_ROOT = Label("//:BUILD").workspace_root

# H100/H200: native sm_90 code plus compute_90 PTX for later GPUs (sm_90 alone under
# --define=cuda_ptx=0, which the GPU bundle uses to stay small).
NVCC_SM90 = "-gencode=arch=compute_90,code=sm_90"
NVCC_PTX90 = "-gencode=arch=compute_90,code=compute_90"

def if_cuda(if_true, if_false = []):
    return select({
        _ENABLED: if_true,
        "//conditions:default": if_false,
    })

def cuda_objects(name, srcs, hdrs = [], copts = []):
    """Compiles each .cu in srcs with nvcc into <name>/<stem>.pic.o (only under --config=cuda).

    Returns the list of object labels, to be placed in a cc_library's srcs through if_cuda().
    The sources include tinyddp's headers as "tinyddp/...": nvcc gets a temporary include
    directory whose `tinyddp` entry links to tinyddp's root in the execution root.
    """
    outs = []
    for src in srcs:
        stem = src.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        out = "%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_%s" % (name, stem),
            srcs = [src] + hdrs + if_cuda(["@cuda//:headers"]),
            outs = [out],
            cmd = " ".join([
                "inc=$$(mktemp -d); trap 'rm -rf $$inc' EXIT; ln -s \"$$PWD/%s\" $$inc/tinyddp;" % _ROOT,
                CUDA_PATH + "/bin/nvcc",
                "-std=c++20 -O2 -Xcompiler -fPIC -Xcompiler -march=x86-64-v3",
                "-Xcompiler -Wall -Xcompiler -Wextra",
                NVCC_SM90,
                "",
            ]) + select({
                _NO_PTX: "",
                "//conditions:default": NVCC_PTX90,
            }) + " ".join([
                "",
                "-I$$inc",
                " ".join(copts),
                "-c $(location %s) -o $@" % src,
            ]),
            target_compatible_with = if_cuda([], ["@platforms//:incompatible"]),
        )
        outs.append(":" + out)
    return outs
