#!/usr/bin/env bash
# The per-ISA kernel libraries (//tensor:cpu_kernels_<isa>) are compiled for different
# instruction sets. If one of them defined a linker-visible symbol that other code also
# defines (an out-of-line copy of an inline function, a template instantiation), the linker
# would keep one copy for everyone, and an AVX2-only host could end up calling AVX-512 code.
# So every global or weak symbol each library defines must carry its instruction set's name
# (the namespaces isa_<isa> and EigenIsa_<isa>, and the table's entry point <isa>_kernels).
# The only exception is DW.ref.__gxx_personality_v0, a pointer to the C++ runtime's
# exception personality routine, which is data, the same in every object.
set -euo pipefail

status=0
checked=0
for archive in "$@"; do
  [[ "$archive" == *.a ]] || continue  # the .so files hold the same objects
  isa=$(basename "$archive" .a)
  isa=${isa#libcpu_kernels_}
  isa=${isa%.pic}
  count=0
  # nm lines of defined globals: "<address> <type> <name>"
  while read -r _ type name; do
    count=$((count + 1))
    if [[ "$name" == *"$isa"* || "$name" == "DW.ref.__gxx_personality_v0" ]]; then continue; fi
    echo "FAIL: $archive defines $type $name ($(c++filt "$name")), which does not name $isa" >&2
    status=1
  done < <(nm -g --defined-only "$archive" | awk 'NF == 3')
  if ((count == 0)); then
    echo "FAIL: $archive defines no global symbols at all (is it the kernels library?)" >&2
    status=1
  fi
  echo "$archive: $count global symbols, all named after $isa"
  checked=$((checked + 1))
done
if ((checked < 2)); then
  echo "FAIL: expected the archives of both kernel libraries as arguments, got $checked" >&2
  status=1
fi
exit $status
