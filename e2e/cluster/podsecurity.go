package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// podSecurityFlags are the apiserver flags that make Pod Security admission enforce level (baseline,
// restricted) in every namespace that carries no pod-security.kubernetes.io/enforce label of its own, as the
// AdmissionConfiguration of many managed clusters does, kube-system exempt as there (kube-proxy's pods use the
// host network). No level: none (Kubernetes' default, privileged).
func podSecurityFlags(workDir, level string) ([]string, error) {
	if level == "" {
		return nil, nil
	}
	cfg := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: %[1]q
        enforce-version: latest
        warn: %[1]q
        warn-version: latest
        audit: %[1]q
        audit-version: latest
      exemptions:
        namespaces: [kube-system]
`, level)
	path := filepath.Join(workDir, "admission.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("write admission configuration: %w", err)
	}
	return []string{"--admission-control-config-file=" + path}, nil
}
