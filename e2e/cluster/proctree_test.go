package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestTreeCPUCountsChildren: a shell whose child spins is charged the child's CPU, first while the child runs
// (the live descendant's own times) and then after it ended (the shell's cutime), while the shell's own CPU
// stays near nothing, so counting the root process alone would miss what its children did.
func TestTreeCPUCountsChildren(t *testing.T) {
	spin := filepath.Join(t.TempDir(), "spin")
	if err := os.WriteFile(spin, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The child spins on the shell's builtin test (no process of its own per turn) while the file exists; the
	// root waits for it, then sleeps, so it outlives it.
	p, err := StartProcess(ProcessSpec{Name: "tree", LogDir: t.TempDir(), Bin: "sh",
		Args: []string{"-c", `sh -c 'while [ -e "$1" ]; do :; done' spin "$1"; sleep 60`, "root", spin}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(0)
	root := p.Pid()
	start, _, err := TreeCPU(root)
	if err != nil {
		t.Fatal(err)
	}

	// The CPU the child has used by now, read from the child itself.
	var child ProcCPU
	ctx := context.Background()
	err = Eventually(ctx, time.Minute, 50*time.Millisecond, func() error {
		child, err = onlyChild(root)
		if err != nil {
			return err
		}
		if child.Own() < 300*time.Millisecond {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the spinning child: %v", err)
	}
	alive, n, err := TreeCPU(root)
	if err != nil {
		t.Fatal(err)
	}
	rootAlone, err := ReadProcCPU(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child running: tree %s (%d processes), the child %s, the root alone %s", alive-start, n, child.Own(), rootAlone.WithChildren())
	if n < 2 || alive-start < child.Own() {
		t.Errorf("child running: tree CPU %s over %d processes, less than the child's own %s: live children not counted", alive-start, n, child.Own())
	}
	if rootAlone.WithChildren() >= child.Own()/2 {
		t.Fatalf("the root alone used %s, the child %s: the test cannot tell children from the root", rootAlone.WithChildren(), child.Own())
	}

	// The child ends; the shell waits for it, so its CPU moves into the shell's cutime and cstime.
	if err := os.Remove(spin); err != nil {
		t.Fatal(err)
	}
	var after ProcCPU
	err = Eventually(ctx, time.Minute, 50*time.Millisecond, func() error {
		if _, err := ReadProcCPU(child.PID); err == nil {
			return errNotYet
		}
		after, err = ReadProcCPU(root)
		if err != nil {
			return err
		}
		if after.CUTime+after.CSTime == 0 {
			return errors.New("the child ended but the root has not waited for it yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ended, n, err := TreeCPU(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("child ended: tree %s (%d processes), the root's own %s", ended-start, n, after.Own())
	if ended-start < child.Own() {
		t.Errorf("child ended: tree CPU %s, less than the child used while it ran (%s): ended children not counted", ended-start, child.Own())
	}
	if after.Own() >= child.Own()/2 {
		t.Errorf("the root's own CPU %s: the child's %s is not only in its cutime", after.Own(), child.Own())
	}
}

// onlyChild is the one child of pid (the spinning shell; the root's sleep starts only after it ended).
func onlyChild(pid int) (ProcCPU, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return ProcCPU{}, err
	}
	var found []ProcCPU
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := ReadProcCPU(child); err == nil && p.PPID == pid {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return ProcCPU{}, errNotYet
	}
	return found[0], nil
}

// TestParseProcStat: the fields are counted from the command name's last parenthesis, which may be part of
// the name.
func TestParseProcStat(t *testing.T) {
	line := "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 7 3 20 0 1 0 5 1000 100 18446744073709551615\n"
	p, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := ProcCPU{PID: 4242, PPID: 17, UTime: 250, STime: 31, CUTime: 7, CSTime: 3}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	if p.WithChildren() != 2910*time.Millisecond || p.Own() != 2810*time.Millisecond {
		t.Errorf("own %s, with children %s; want 2.81s and 2.91s", p.Own(), p.WithChildren())
	}
	for _, bad := range []string{"", "4242 no name S 1", "4242 (x) S 17 1 2"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
