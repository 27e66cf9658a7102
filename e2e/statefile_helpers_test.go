package e2e

import (
	"encoding/json"
	"fmt"
	"os"
)

// savedState is the part of an exporter's state file (docs/rotation.md, "What a restart keeps") the scenarios
// read: its runs and dropped-since times, and the exposure episodes that ended and no reader took yet, as the
// file names them.
type savedState struct {
	Runs []struct {
		Address        string `json:"address"`
		Port           int32  `json:"port"`
		Attempts       uint64 `json:"attempts"`
		Told           bool   `json:"told"`
		ClientAttempts uint64 `json:"client_attempts"`
	} `json:"runs"`
	Dropped []struct {
		Namespace string `json:"namespace"`
		Service   string `json:"service"`
		Kind      string `json:"kind"`
		Address   string `json:"address"`
		Since     int64  `json:"since_unix_nano"`
	} `json:"dropped"`
	Exposure struct {
		Finished []struct {
			Key struct {
				Service string `json:"service"`
				Kind    string `json:"kind"`
			} `json:"key"`
			Attempts uint64 `json:"attempts"`
		} `json:"finished"`
	} `json:"exposure"`
}

// readStateFile reads the state an exporter's state file at path holds.
func readStateFile(path string) (savedState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return savedState{}, err
	}
	var env struct {
		State savedState `json:"state"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return savedState{}, fmt.Errorf("%s: %w", path, err)
	}
	return env.State, nil
}
