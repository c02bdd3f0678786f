#!/bin/sh
# The layer check must fail on what it forbids: in a copy of the tree,
# plants an include of a higher layer's header, another layer's private
# header, a flow layer's private header included by a lower flow layer or
# by a flow layer it is not offered to, a circle of calls (within the flow
# runtime, and between the runtime and the stages), and a test that
# includes a private header without being white-box, one at a time, and
# expects a FAIL naming each; the copy as it is must pass.
#   layering_planted.sh SOURCE_DIR WORK_DIR
set -u
src=$1 work=$2
check() { # WHAT EXPECTED-TEXT
  out=$(python3 "$src/tests/layering.py" "$work" 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -eq 0 ] || ! printf '%s\n' "$out" | grep -q -- "$2"; then
    echo "FAIL: the check did not catch $1"
    exit 1
  fi
}
fresh() {
  rm -rf "$work"; mkdir -p "$work"
  cp -r "$src/src" "$src/include" "$src/tests" "$src/bench" "$work/"
}

fresh
python3 "$src/tests/layering.py" "$work" || { echo "FAIL: the copy itself does not pass"; exit 1; }
fresh
sed -i '0,/#include "core-impl.h"/s//#include "core-impl.h"\n#include "kpipe\/flow.h"/' "$work/src/core/dtype.c"
check "core including flow.h" "src/core/dtype.c:.*layer core includes kpipe/flow.h of the higher layer flow"
fresh
sed -i '0,/#include "stages-impl.h"/s//#include "stages-impl.h"\n#include "..\/..\/pipeline\/pipeline-impl.h"/' "$work/src/flow/stages/stages.c"
check "a private header across layers" "src/flow/stages/stages.c:.*pipeline-impl.h, a private header of layer pipeline"
fresh
sed -i '0,/#include "runtime-impl.h"/s//#include "runtime-impl.h"\n#include "..\/json\/flow_json-impl.h"/' "$work/src/flow/runtime/flow.c"
check "the flow runtime including the JSON form's header" "src/flow/runtime/flow.c:.*flow_json-impl.h, a private header of layer flow/json"
fresh
sed -i '0,/#include "stages-impl.h"/s//#include "stages-impl.h"\n#include "..\/remote\/remote_end-impl.h"/' "$work/src/flow/stages/stages.c"
check "the stages including the remote ends' header, offered to the JSON form only" "src/flow/stages/stages.c:.*remote_end-impl.h, a private header of layer flow/remote"
fresh
printf '\nvoid kp__planted(void);\nvoid kp__planted(void) { (void)kp_flow_cancelled(NULL); }\n' >> "$work/src/flow/runtime/kinds.c"
printf '\nvoid kp__planted(void);\nvoid kp__planted_too(void);\nvoid kp__planted_too(void) { kp__planted(); }\n' >> "$work/src/flow/runtime/flow.c"
check "a circle of calls" "a circle of files calling each other"
fresh
printf '\nvoid kp__planted(void);\nvoid kp__planted(void) { (void)kp__stage_video_sink(NULL, NULL, NULL, 0, NULL); }\n' >> "$work/src/flow/runtime/kinds.c"
check "a circle of calls between the flow runtime and the stages" "a circle of files calling each other: .*src/flow/runtime/kinds.c calls kp__stage_video_sink of src/flow/stages/video_files.c"
fresh
sed -i '0,/#include <cmocka.h>/s//#include <cmocka.h>\n#include "..\/src\/flow\/runtime\/flow-impl.h"/' "$work/tests/test_core.c"
check "a test including a private header" "tests/test_core.c:.*flow-impl.h, a private header of layer flow/runtime"
echo "PASS: every planted fault was caught"
