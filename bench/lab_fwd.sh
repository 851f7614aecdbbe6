#!/usr/bin/env bash
# The forward's plans side by side, one bench line each (time us, GB/s, % of
# copy): LAB_FWD="norm dtype cols plan [res] [nw]; ..." with plan "-" (the
# planner's), "held" (FUSEDNORM_FWD_ROWS_CLUSTER=0: the register tile's rows
# over a cluster held, the plan before steps 90 and 96) or "ept,tpr,cluster"
# (FUSEDNORM_PLAN_FWD);
# res: the residual call; nw: no weight (--no-weight). BUILD: the carried
# build (default .devbin).
FN=${BUILD:-.devbin}/fusednorm
b() { # norm dtype cols plan [res] [nw]
  local pl=$4 rc= res= nw= f
  for f in "${@:5}"; do case $f in res) res=--residual ;; nw) nw=--no-weight ;; esac; done
  [ "$pl" = - ] && pl=
  [ "$pl" = held ] && { pl=; rc=0; }
  printf '%-3s %-4s %7s %-10s %-4s %-3s ' $1 $2 $3 "${4/-/planner}" "${res:+res}" "${nw:+nw}"
  FUSEDNORM_FWD_ROWS_CLUSTER="$rc" FUSEDNORM_PLAN_FWD="$pl" "$FN" bench --backend cuda --norm $1 --dtype $2 --cols $3 --pass fwd $res $nw 2>/dev/null |
    awk '$1=="'$1'"{print $7, $8, $9}'
}
IFS=';' read -ra items <<<"${LAB_FWD:?LAB_FWD=\"norm dtype cols plan [res]; ...\"}"
for item in "${items[@]}"; do b $item; done
