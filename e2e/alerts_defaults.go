package e2e

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// alertExpr is the expression of the named alert in a shipped rule file.
func alertExpr(repo, file, alert string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repo, file))
	if err != nil {
		return "", fmt.Errorf("read rules: %w", err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rf); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return r.Expr, nil
			}
		}
	}
	return "", fmt.Errorf("%s: no alert %s", file, alert)
}
