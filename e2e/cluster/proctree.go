package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: the kernel reports them in USER_HZ ticks, which is
// 100 on every Linux architecture (sysconf(_SC_CLK_TCK) returns the same constant; reading it needs cgo).
const userHZ = 100

// ProcCPU is one process's CPU as /proc/<pid>/stat gives it, in clock ticks.
type ProcCPU struct {
	PID, PPID int
	// UTime and STime are the process's own user and system time (every thread); CUTime and CSTime those of its
	// children that have ended and been waited for, with their own waited-for descendants.
	UTime, STime, CUTime, CSTime int64
}

// Own is the process's own CPU, without its children.
func (p ProcCPU) Own() time.Duration { return ticks(p.UTime + p.STime) }

// WithChildren is the process's own CPU and that of its ended, waited-for children.
func (p ProcCPU) WithChildren() time.Duration { return ticks(p.UTime + p.STime + p.CUTime + p.CSTime) }

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// ReadProcCPU reads /proc/<pid>/stat.
func ReadProcCPU(pid int) (ProcCPU, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcCPU{}, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	p, err := parseProcStat(b)
	if err != nil {
		return ProcCPU{}, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return p, nil
}

// parseProcStat parses the fields of /proc/<pid>/stat this file needs. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so the fields are counted from its last ')'.
func parseProcStat(b []byte) (ProcCPU, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return ProcCPU{}, errors.New("no command name in /proc stat")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return ProcCPU{}, fmt.Errorf("pid in /proc stat: %w", err)
	}
	// After the name: state (field 3), ppid (4), ... utime (14), stime (15), cutime (16), cstime (17).
	f := bytes.Fields(b[end+1:])
	if len(f) < 15 {
		return ProcCPU{}, fmt.Errorf("/proc stat has %d fields after the name, want at least 15", len(f))
	}
	var n [5]int64
	for i, field := range []int{4, 14, 15, 16, 17} {
		if n[i], err = strconv.ParseInt(string(f[field-3]), 10, 64); err != nil {
			return ProcCPU{}, fmt.Errorf("field %d of /proc stat: %w", field, err)
		}
	}
	return ProcCPU{PID: pid, PPID: int(n[0]), UTime: n[1], STime: n[2], CUTime: n[3], CSTime: n[4]}, nil
}

// TreeCPU is the CPU a process and its descendants have used: the root's and every live descendant's
// utime+stime+cutime+cstime (/proc/*/stat, the tree found through each process's ppid). Children that ran and
// ended count through their parent's cutime and cstime (Go's exec.Cmd and a shell wait for theirs), children
// alive at the moment through their own. The CPU of a window is TreeCPU at its end minus TreeCPU at its start:
// an exporter's iptables-save and nft runs, kube-proxy's iptables-restore and nft runs, are then counted
// whether they ended within the window or were still running at either boundary. (A child alive at the start
// that ends within the window is counted whole, its time before the start included: a child here runs for
// seconds at most, the windows are minutes.) It also returns how many processes made up the tree.
func TreeCPU(root int) (time.Duration, int, error) {
	// A direct child reaped while /proc is being read would be missed (read neither alive nor in the root's
	// cutime yet) or counted twice: a tree read is kept only when the root's children's total did not move
	// during it. One iptables-save run can be a second of CPU at 10,000 Services, too much to lose at random.
	var err error
	for range 10 {
		var before, after ProcCPU
		if before, err = ReadProcCPU(root); err != nil {
			return 0, 0, err
		}
		var total time.Duration
		var n int
		if total, n, err = treeCPU(root); err != nil {
			return 0, 0, err
		}
		if after, err = ReadProcCPU(root); err != nil {
			return 0, 0, err
		}
		if before.CUTime+before.CSTime == after.CUTime+after.CSTime {
			return total, n, nil
		}
	}
	return 0, 0, fmt.Errorf("cpu of the tree of pid %d: its children kept ending while /proc was read", root)
}

func treeCPU(root int) (time.Duration, int, error) {
	rootCPU, err := ReadProcCPU(root)
	if err != nil {
		return 0, 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, fmt.Errorf("list /proc: %w", err)
	}
	children := map[int][]ProcCPU{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		p, err := ReadProcCPU(pid)
		if err != nil {
			continue // ended since the listing: its parent's cutime has it once waited for
		}
		children[p.PPID] = append(children[p.PPID], p)
	}
	total, n := rootCPU.WithChildren(), 1
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			total += c.WithChildren()
			n++
			queue = append(queue, c.PID)
		}
	}
	return total, n, nil
}
