package drill

// The operators' commands, word for word from the drill (docs/drill.md): the live drill runs them
// unchanged with bash in the outside client's namespace, with the pinned kubectl first on PATH and KUBECONFIG
// set to the harness's in-namespace admin kubeconfig. TestCommandsAreTheDrills checks them against docs/drill.md.
const (
	// ObservePods lists the replicas with their nodes.
	ObservePods = `kubectl -n kubelings get pods -o wide -l app=checkout          # NODE column: all the same`
	// ObservePolicy prints the Service's externalTrafficPolicy.
	ObservePolicy = `kubectl -n kubelings get svc checkout -o jsonpath='{.spec.externalTrafficPolicy}{"\n"}'`
	// ObserveTraffic curls :30090 on every worker's InternalIP and prints "<ip>: ok" or "<ip>: BLACKHOLE".
	ObserveTraffic = `for ip in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' \
    -o jsonpath='{range .items[*]}{.status.addresses[?(@.type=="InternalIP")].address}{" "}{end}'); do
  echo -n "$ip: "; curl -fsS -m 3 "http://$ip:30090/" >/dev/null 2>&1 && echo ok || echo BLACKHOLE
done`
	// FixRemovePin drops the nodeSelector.
	FixRemovePin = `kubectl -n kubelings patch deploy checkout --type=json \
  -p='[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]'`
	// FixSpread spreads one replica per node, honouring taints, without a surge pod.
	FixSpread = `kubectl -n kubelings patch deploy checkout --type=merge -p '{
  "spec": {
    "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    "template": {"spec": {"topologySpreadConstraints": [{
      "maxSkew": 1,
      "topologyKey": "kubernetes.io/hostname",
      "whenUnsatisfiable": "DoNotSchedule",
      "nodeTaintsPolicy": "Honor",
      "labelSelector": {"matchLabels": {"app": "checkout"}},
      "matchLabelKeys": ["pod-template-hash"]
    }]}}
  }
}'`
	// RolloutStatus waits for the rollout.
	RolloutStatus = `kubectl -n kubelings rollout status deploy/checkout`
)

// ObserveCommands returns the drill's observe block, in order.
func ObserveCommands() []string { return []string{ObservePods, ObservePolicy, ObserveTraffic} }

// FixCommands returns the drill's fix block, in order.
func FixCommands() []string { return []string{FixRemovePin, FixSpread, RolloutStatus} }
