#!/usr/bin/env bash
# Any bench variants side by side, one line each (time us, GB/s, % of copy),
# for knobs and flags that lab_fwd.sh and device.sh's lab do not take (the
# backward's residual call, FUSEDNORM_FWD_DEEP with a plan, ...):
#   LAB_LINES="[VAR=value ...] : norm dtype cols pass [bench flags]; ..."
# e.g. "FUSEDNORM_PLAN_BWD=16,256,16 : rms f32 65536 bwd --residual". BUILD:
# the carried build (default .devbin).
FN=${BUILD:-.devbin}/fusednorm
IFS=';' read -ra items <<<"${LAB_LINES:?LAB_LINES=\"[VAR=value ...] : norm dtype cols pass [flags]; ...\"}"
for item in "${items[@]}"; do
  envs=${item%%:*} args=${item#*:}
  read -r norm dtype cols pass flags <<<"$args"
  printf '%-36s %-3s %-4s %7s %-4s %-24s ' "${envs:-planner}" $norm $dtype $cols $pass "$flags"
  env $envs "$FN" bench --backend cuda --norm $norm --dtype $dtype --cols $cols --pass $pass $flags 2>/dev/null |
    awk '$1=="'$norm'"{print $7, $8, $9}'
done
