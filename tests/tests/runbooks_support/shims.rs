//! The `helm` and `kubectl` a runbook's commands find first on their PATH. Both pass through
//! to the real tools for what the test cluster serves; they stand in only for what it cannot:
//! - `helm install|upgrade NAME CHART FLAGS…` renders with `helm template NAME CHART FLAGS…`
//!   (the same flags; `--reuse-values` re-applies the flags of the last install or upgrade),
//!   checks the render against Kubernetes' schemas with `kubernetes-validate --strict` as
//!   scripts/check-deploy.sh does, and hands it (as JSON) to the test's kubelet, which runs
//!   every Deployment of it as processes; `helm uninstall NAME` takes it back;
//! - `kubectl` on DaemonSets, pods, `logs` and `port-forward`: fake-apiserver serves no apps/v1
//!   and no pods, and nothing here runs a kubelet. DaemonSets are files under
//!   `$RUNBOOK_STATE/daemonsets` (`get` prints them through kubectl's own printers, offline);
//!   a deleted DaemonSet's pods are gone at once; `logs deploy/X` is the log of the kubelet's
//!   process for X, `port-forward deploy/X L:R` forwards to its port R (a number or a name).
//!
//! Everything else goes to the real kubectl, against fake-apiserver.

/// `helm`, as a bash script. Needs `REAL_HELM`, `RUNBOOK_STATE`, `TOOLS_VENV`.
pub const HELM: &str = r#"#!/usr/bin/env bash
set -euo pipefail
state="$RUNBOOK_STATE/releases"
mkdir -p "$state"
verb="${1:-}"
case "$verb" in
  install|upgrade)
    shift
    name="$1"; chart="$2"; shift 2
    flags=()
    reuse=false
    for a in "$@"; do
      if [ "$a" = --reuse-values ]; then reuse=true; else flags+=("$a"); fi
    done
    if [ "$verb" = upgrade ]; then
      [ -f "$state/$name.flags" ] || { echo "Error: UPGRADE FAILED: \"$name\" has no deployed releases" >&2; exit 1; }
    elif [ -f "$state/$name.flags" ]; then
      echo "Error: INSTALLATION FAILED: cannot re-use a name that is still in use" >&2; exit 1
    fi
    all=()
    if $reuse; then mapfile -d '' -t all < "$state/$name.flags"; fi
    all+=("${flags[@]}")
    out="$(mktemp -d)"
    "$REAL_HELM" template "$name" "$chart" "${all[@]}" > "$out/render.yaml"
    "$TOOLS_VENV/bin/kubernetes-validate" -k 1.33 --strict --quiet "$out/render.yaml" >&2
    "$TOOLS_VENV/bin/python" -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], open(sys.argv[2], "w"))' \
      "$out/render.yaml" "$state/$name.json.new"
    printf '%s\0' "${all[@]}" > "$state/$name.flags"
    mv "$state/$name.json.new" "$state/$name.json"
    rm -rf "$out"
    echo "Release \"$name\" has been $([ "$verb" = install ] && echo installed || echo upgraded). Happy Helming!"
    ;;
  uninstall)
    name="$2"
    [ -f "$state/$name.flags" ] || { echo "Error: uninstall: Release not loaded: $name: release: not found" >&2; exit 1; }
    rm -f "$state/$name.flags" "$state/$name.json"
    echo "release \"$name\" uninstalled"
    ;;
  *)
    exec "$REAL_HELM" "$@"
    ;;
esac
"#;

/// `kubectl`, as a bash script. Needs `REAL_KUBECTL`, `RUNBOOK_STATE`, `KUBECONFIG`.
pub const KUBECTL: &str = r#"#!/usr/bin/env bash
set -euo pipefail
ds="$RUNBOOK_STATE/daemonsets"
pods="$RUNBOOK_STATE/pods"
mkdir -p "$ds"
args=("$@")
# The verb and its first operand, past -n/--namespace.
rest=()
i=0
while [ $i -lt ${#args[@]} ]; do
  case "${args[$i]}" in
    -n|--namespace) i=$((i + 2)) ;;
    *) rest+=("${args[$i]}"); i=$((i + 1)) ;;
  esac
done
verb="${rest[0]:-}"; what="${rest[1]:-}"; third="${rest[2]:-}"
pod_of() { # deploy/NAME -> its kubelet file
  local name="${1#deploy/}"; name="${name#deployment/}"
  [ -f "$pods/$name" ] || { echo "Error from server (NotFound): deployments.apps \"$name\" not found" >&2; exit 1; }
  echo "$pods/$name"
}
case "$verb/$what" in
  get/ds|get/daemonset|get/daemonsets)
    [ -f "$ds/$third.yaml" ] || { echo "Error from server (NotFound): daemonsets.apps \"$third\" not found" >&2; exit 1; }
    exec "$REAL_KUBECTL" annotate --local -f "$ds/$third.yaml" runbook.test/none- "${rest[@]:3}"
    ;;
  delete/ds|delete/daemonset|delete/daemonsets)
    [ -f "$ds/$third.yaml" ] || { echo "Error from server (NotFound): daemonsets.apps \"$third\" not found" >&2; exit 1; }
    rm "$ds/$third.yaml"
    echo "daemonset.apps \"$third\" deleted"
    ;;
  wait/*)
    # --for=delete pod -l KEY=VALUE: the pods of a DaemonSet still there.
    selector=""
    for ((j = 0; j < ${#rest[@]}; j++)); do
      [ "${rest[$j]}" = -l ] && selector="${rest[$((j + 1))]}"
    done
    [[ " ${rest[*]} " == *" --for=delete "* && " ${rest[*]} " == *" pod "* && -n "$selector" ]] \
      || { echo "runbook kubectl: only 'wait --for=delete pod -l …' is stood in for: ${args[*]}" >&2; exit 1; }
    for f in "$ds"/*.yaml; do
      [ -e "$f" ] || continue
      if grep -qE "^[[:space:]]*${selector%%=*}:[[:space:]]*${selector#*=}\$" "$f"; then
        echo "error: timed out waiting for the condition on pods" >&2; exit 1
      fi
    done
    ;;
  apply/-f)
    kind="$(sed -n 's/^kind: *//p' "$third" | head -1)"
    if [ "$kind" = DaemonSet ]; then
      name="$(sed -n '/^metadata:/,/^[a-z]/s/^  name: *//p' "$third" | head -1)"
      cp "$third" "$ds/$name.yaml"
      echo "daemonset.apps/$name created"
    else
      exec "$REAL_KUBECTL" "$@"
    fi
    ;;
  get/deploy/*|get/deployment/*)
    pod_of "$what" >/dev/null
    echo "deployment.apps/${what#*/}"
    ;;
  logs/*)
    log="$(sed -n 's/^log=//p' "$(pod_of "$what")")"
    cat "$log"
    ;;
  port-forward/*)
    pod="$(pod_of "$what")"
    local_port="${third%%:*}"; remote="${third#*:}"
    port="$(sed -n "s/^port\\.$remote=//p" "$pod")"
    [ -n "$port" ] || { echo "error: pod has no port $remote" >&2; exit 1; }
    echo "Forwarding from 127.0.0.1:$local_port -> $remote"
    exec socat "TCP-LISTEN:$local_port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$port"
    ;;
  *)
    exec "$REAL_KUBECTL" "$@"
    ;;
esac
"#;
