#!/usr/bin/env bash
# The forward's plans side by side, one bench line each (time us, GB/s, % of
# copy): LAB_FWD="norm dtype cols plan [res]; ..." with plan "-" (the
# planner's), "held" (FUSEDNORM_FWD_ROWS_CLUSTER=0: RMSNorm's rows past 64 KiB
# held, the plan before step 90) or "ept,tpr,cluster" (FUSEDNORM_PLAN_FWD);
# res: the residual call. BUILD: the carried build (default .devbin).
FN=${BUILD:-.devbin}/fusednorm
b() { # norm dtype cols plan [res]
  local pl=$4 rc=; [ "$pl" = - ] && pl=
  [ "$pl" = held ] && { pl=; rc=0; }
  printf '%-3s %-4s %7s %-10s %-4s ' $1 $2 $3 "${4/-/planner}" "${5:+res}"
  FUSEDNORM_FWD_ROWS_CLUSTER="$rc" FUSEDNORM_PLAN_FWD="$pl" "$FN" bench --backend cuda --norm $1 --dtype $2 --cols $3 --pass fwd ${5:+--residual} 2>/dev/null |
    awk '$1=="'$1'"{print $7, $8, $9}'
}
IFS=';' read -ra items <<<"${LAB_FWD:?LAB_FWD=\"norm dtype cols plan [res]; ...\"}"
for item in "${items[@]}"; do b $item; done
