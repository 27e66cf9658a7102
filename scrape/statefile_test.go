package scrape

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localtraffic/localtraffic-exporter/scrape/scrapetest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/localtraffic/localtraffic-exporter/kubeview"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/arrivals"
	"github.com/localtraffic/localtraffic-exporter/nodeprobe/kernelrules"
	"github.com/localtraffic/localtraffic-exporter/verdict"
)

// restoringMeter is a fakeMeter that continues restored runs as *arrivals.Meter does: a restored destination's
// count starts from its run.
type restoringMeter struct {
	scrapetest.Meter
	restored map[arrivals.Dest]arrivals.Run
}

func (m *restoringMeter) Restore(runs map[arrivals.Dest]arrivals.Run) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.restored = runs
	for d, r := range runs {
		m.Counts[d] = arrivals.DestCount{Attempts: r.Attempts, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen,
			ActiveSince: r.ActiveSince, WatchedSince: r.WatchedSince, Restored: r.Attempts}
	}
}

// clock is a settable time for the state file and the fake meter alike. Its boot clock runs with it (no step)
// unless a test moves the wall clock alone (stepWall) or reboots.
type clock struct {
	now    time.Time
	boot   string        // the boot's ID ("" : "boot-0")
	noBoot bool          // no boot clock can be read
	offset time.Duration // boot clock = now - offset
}

func (c *clock) Now() time.Time { return c.now }

func (c *clock) Boot() (BootClock, error) {
	if c.noBoot {
		return BootClock{}, errors.New("no boot clock in this test")
	}
	return BootClock{ID: cmp.Or(c.boot, "boot-0"), Since: c.now.Sub(time.Unix(0, 0)) - c.offset}, nil
}

// stepWall steps the wall clock by d, as `date -s` does: the boot clock does not move.
func (c *clock) stepWall(d time.Duration) {
	c.now = c.now.Add(d)
	c.offset += d
}

// restartNode is one node's exporter in these tests: a NodePort Service without a local endpoint on a node
// excluded from load balancers (kube-proxy ignores that: clients still reach it), judged by arrivals.
type restartNode struct {
	t     *testing.T
	path  string
	clock *clock
	meter *restoringMeter
	sf    *StateFile
	g     *Gatherer
	logs  *bytes.Buffer
}

var restartNP = arrivals.NodeDest(arrivals.TCP, false, 30090)

// start starts an exporter process: a new meter and gatherer over the state file at path ("" for none).
func startNode(t *testing.T, path string, c *clock) *restartNode {
	t.Helper()
	return startNodeOf(t, path, c, "")
}

// startNodeOf is startNode with the Service's UID set to uid.
func startNodeOf(t *testing.T, path string, c *clock, uid types.UID) *restartNode {
	t.Helper()
	n := &restartNode{t: t, path: path, clock: c, logs: &bytes.Buffer{}}
	logger := slog.New(slog.NewTextHandler(n.logs, nil))
	n.meter = &restoringMeter{Meter: scrapetest.Meter{Status: arrivals.StatusOK, Now: c.now, Counts: map[arrivals.Dest]arrivals.DestCount{}}}
	n.sf = OpenStateFile(StateFileConfig{Path: path, Node: "node-1", Logger: logger, Now: c.Now, Boot: c.Boot})
	node := kubeview.NodeState{Name: "node-1", Found: true, Excluded: true, InternalIPs: []string{"10.0.0.1"}}
	svc := scrapetest.NodePortService(0)
	svc.UID = uid
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: node, Services: []kubeview.ServiceState{svc}}}
	n.g = NewGatherer(GathererConfig{View: view, Addrs: scrapetest.Addrs{"127.0.0.1", "10.0.0.1"}, KubeProxyAddress: scrapetest.NoAddress,
		Meter: n.meter, Grace: 2 * time.Minute, ProbeTimeout: time.Second, Logger: logger, State: n.sf})
	return n
}

// scrape moves the clock to at, lets attempts keep arriving at the NodePort (one a second, the latest a
// second ago, on top of what the meter holds), and gathers.
func (n *restartNode) scrape(at time.Time) *State {
	n.clock.now = at
	n.meter.Mu.Lock()
	n.meter.Now = at
	c := n.meter.Counts[restartNP]
	if c.Attempts == 0 || at.Sub(c.LastSeen) >= DefaultQuiet {
		c.ActiveSince = at.Add(-time.Second)
	}
	if c.FirstSeen.IsZero() {
		c.FirstSeen = at.Add(-time.Second)
	}
	c.Attempts += 10
	c.LastSeen = at.Add(-time.Second)
	n.meter.Counts[restartNP] = scrapetest.Repeating(c)
	n.meter.Mu.Unlock()
	return n.g.Gather(context.Background())
}

func firstReason(st *State) verdict.Reason { return st.Services[0].Verdict.Reason }

// An exporter restarted while its node pages picks the page up where it was: the first scrape after the
// restart reports the same critical reason (the runs and dropped-since times came back from the state file),
// the node-wide arrival total counts only new attempts, and the file is a round trip of what was written.
// Without the state file the same restart reports no blackhole at all until the grace window has passed again.
func TestStateFileRestartKeepsThePage(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	path := filepath.Join(t.TempDir(), "state.json")
	c := &clock{now: t0}
	before := startNode(t, path, c)
	if got := before.sf.State(); got != stateNew {
		t.Fatalf("first start: state %q, want %q", got, stateNew)
	}
	if r := firstReason(before.scrape(t0)); r != "" {
		t.Fatalf("first scrape: reason %q, nothing says since when it drops yet", r)
	}
	for at := t0.Add(30 * time.Second); !at.After(t0.Add(3 * time.Minute)); at = at.Add(30 * time.Second) {
		before.scrape(at)
	}
	st := before.scrape(t0.Add(3*time.Minute + 30*time.Second))
	if r := firstReason(st); r != verdict.ReasonTrafficLost {
		t.Fatalf("past grace: reason %q, want traffic_lost", r)
	}
	wantRun := before.meter.Snapshot().Dests[0]
	before.g.SaveState() // SIGTERM

	// Restarted 20 s later: the first scrape pages as before.
	c.now = t0.Add(3*time.Minute + 50*time.Second)
	after := startNode(t, path, c)
	if got := after.sf.State(); got != stateRestored {
		t.Fatalf("restart: state %q, want %q\n%s", got, stateRestored, after.logs)
	}
	run, ok := after.meter.restored[restartNP]
	if !ok || run.Attempts != wantRun.Attempts || !run.LastSeen.Equal(wantRun.LastSeen) || !run.ActiveSince.Equal(wantRun.ActiveSince) ||
		!run.FirstSeen.Equal(wantRun.FirstSeen) {
		t.Fatalf("restored run %+v (%v), want the one written %+v", run, ok, wantRun)
	}
	st = after.scrape(c.now)
	if r := firstReason(st); r != verdict.ReasonTrafficLost {
		t.Fatalf("first scrape after the restart: reason %q, want traffic_lost", r)
	}
	if got := st.Arrivals.Totals[ArrivalKey{verdict.NodePort, string(corev1.IPv4Protocol)}]; got != 10 {
		t.Errorf("arrivals_total after the restart: %d, want the 10 new attempts only", got)
	}
	if st.StateFile != stateRestored {
		t.Errorf("state file state %q, want %q", st.StateFile, stateRestored)
	}

	// The control: the same restart without the state file.
	c.now = t0.Add(3*time.Minute + 50*time.Second)
	blind := startNode(t, "", c)
	if blind.sf != nil || blind.g.cfg.State.State() != stateDisabled {
		t.Fatalf("--state.file= : state file %v", blind.sf)
	}
	if st := blind.scrape(c.now); st.Services[0].Verdict.Blackhole {
		t.Fatalf("without the state file the first scrape after the restart pages: %+v", st.Services[0].Verdict)
	}
}

// A dropped-since time belongs to the Service it was found for: restored onto a Service deleted and created
// again under its name while the exporter was down (another UID), it does not count, and the new Service's
// grace window starts at its first decision. Restored onto the same Service, it counts (the control). The fake
// meter keeps the run either way, as an old meter without owners did: the dropped-since time alone decides.
func TestStateFileDroppedSinceIsTheServices(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name  string
		after types.UID
		want  verdict.Reason
	}{
		{"same Service", "uid-1", verdict.ReasonTrafficLost},
		{"created again", "uid-2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			c := &clock{now: t0}
			before := startNodeOf(t, path, c, "uid-1")
			var st *State
			for at := t0; !at.After(t0.Add(3*time.Minute + 30*time.Second)); at = at.Add(30 * time.Second) {
				st = before.scrape(at)
			}
			if r := firstReason(st); r != verdict.ReasonTrafficLost {
				t.Fatalf("past grace: reason %q, want traffic_lost", r)
			}
			before.g.SaveState()

			c.now = t0.Add(3*time.Minute + 50*time.Second)
			after := startNodeOf(t, path, c, tc.after)
			if got := after.sf.State(); got != stateRestored {
				t.Fatalf("restart: state %q, want %q\n%s", got, stateRestored, after.logs)
			}
			st = after.scrape(c.now)
			if r := firstReason(st); r != tc.want {
				t.Errorf("first scrape after the restart: reason %q, want %q", r, tc.want)
			}
			d := st.Services[0].Verdict.Families[0].Entries[0].Destination
			want := t0
			if tc.after != "uid-1" {
				want = c.now
			}
			if got := after.g.arrivals.droppedAt(d, tc.after); !got.Equal(want) {
				t.Errorf("dropped since %s, want %s", got.Format(time.TimeOnly), want.Format(time.TimeOnly))
			}
		})
	}
}

// A wall-clock step between the write and the restart (`date -s`, either way, by minutes) leaves the restored
// state right: on the same boot the boot clock tells how much time really passed, and every stored time moves
// with the wall clock. The controls: the same steps without a boot clock (what older files hold) drop the runs
// when stepped forward and keep them in the future when stepped back, and either way the page is lost; after a
// reboot the wall clock alone counts.
func TestStateFileWallClockStep(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name      string
		noBoot    bool
		reboot    bool
		step      time.Duration
		state     string
		moved     time.Duration // how far the restored times moved
		stillPage bool
	}{
		{"forward 10m", false, false, 10 * time.Minute, stateRestored, 10 * time.Minute, true},
		{"back 10m", false, false, -10 * time.Minute, stateRestored, -10 * time.Minute, true},
		{"forward 10m, no boot clock", true, false, 10 * time.Minute, stateExpired, 0, false},
		{"back 10m, no boot clock", true, false, -10 * time.Minute, stateRestored, 0, false},
		{"back 10m, after a reboot", false, true, -10 * time.Minute, stateRestored, 0, false},
		{"forward 300ms (moved, not logged)", false, false, 300 * time.Millisecond, stateRestored, 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			c := &clock{now: t0, noBoot: tc.noBoot}
			before := startNode(t, path, c)
			for at := t0; !at.After(t0.Add(3*time.Minute + 30*time.Second)); at = at.Add(30 * time.Second) {
				before.scrape(at)
			}
			if r := firstReason(before.scrape(c.now)); r != verdict.ReasonTrafficLost {
				t.Fatalf("before the restart: reason %q, want traffic_lost", r)
			}
			wantRun := before.meter.Snapshot().Dests[0]
			before.g.SaveState()

			c.now = c.now.Add(20 * time.Second) // the restart, 20 s later
			c.stepWall(tc.step)
			if tc.reboot {
				c.boot, c.offset = "boot-b", c.now.Sub(time.Unix(0, 0))-20*time.Second
			}
			after := startNode(t, path, c)
			if got := after.sf.State(); got != tc.state {
				t.Fatalf("state %q, want %q\n%s", got, tc.state, after.logs)
			}
			run, ok := after.meter.restored[restartNP]
			if tc.state == stateExpired {
				if ok {
					t.Fatalf("a run restored from an expired file: %+v", run)
				}
			} else if !ok || !run.LastSeen.Equal(wantRun.LastSeen.Add(tc.moved)) || !run.ActiveSince.Equal(wantRun.ActiveSince.Add(tc.moved)) ||
				!run.FirstSeen.Equal(wantRun.FirstSeen.Add(tc.moved)) {
				t.Fatalf("restored run %+v (%v), want the one written %+v moved by %v", run, ok, wantRun, tc.moved)
			}
			// A step is logged from a second up: below, every restart's reading jitter would be one.
			if got, want := strings.Contains(after.logs.String(), "the wall clock was stepped"), tc.moved.Abs() >= time.Second; got != want {
				t.Errorf("the step logged: %v, want %v\n%s", got, want, after.logs)
			}
			if got := firstReason(after.scrape(c.now)) == verdict.ReasonTrafficLost; got != tc.stillPage {
				t.Errorf("first scrape after the restart pages: %v, want %v", got, tc.stillPage)
			}
		})
	}
}

// writeRaw writes a state file with body as its state, sealed with a correct checksum unless sum is given.
func writeRaw(t *testing.T, path string, version int, body any, sum string) {
	t.Helper()
	state, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if sum == "" {
		s := sha256.Sum256(state)
		sum = hex.EncodeToString(s[:])
	}
	data, err := json.Marshal(stateEnvelope{Version: version, SHA256: sum, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A file that cannot be trusted is reported (a warning and the state metric), restores nothing, and is replaced
// by the next scrape's write with one that loads.
func TestStateFileUntrusted(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	fresh := stateBody{Node: "node-1", WrittenAt: t0.UnixNano(), KubeProxySeenAt: t0.UnixNano(),
		Runs: []runEntry{{Protocol: "TCP", Address: "0.0.0.0", Port: 30090, Attempts: 5, FirstSeen: t0.UnixNano(),
			LastSeen: t0.UnixNano(), ActiveSince: t0.UnixNano(), WatchedSince: t0.UnixNano()}},
		Dropped: []droppedEntry{{Namespace: "kubelings", Service: "checkout", Port: "http", Protocol: "TCP", Family: "IPv4",
			Kind: "node_port", DestPort: 30090, Since: t0.UnixNano()}}}
	tooMany := fresh
	tooMany.Runs = make([]runEntry, maxStateEntries+1)
	for i := range tooMany.Runs {
		tooMany.Runs[i] = fresh.Runs[0]
		tooMany.Runs[i].Port = uint16(1 + i)
	}
	otherNode := fresh
	otherNode.Node = "node-2"
	badRun := fresh
	badRun.Runs = []runEntry{{Protocol: "ICMP", Address: "0.0.0.0", Port: 30090, Attempts: 5, LastSeen: t0.UnixNano()}}
	badDropped := fresh
	badDropped.Dropped = []droppedEntry{{Namespace: "kubelings", Service: "checkout", Protocol: "TCP", Family: "IPv4",
		Kind: "node_port", Address: "192.0.2.1", DestPort: 30090, Since: t0.UnixNano()}}
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path string)
		state string
		err   string // in the warning
	}{
		{"garbage", func(t *testing.T, path string) { os.WriteFile(path, []byte("\x00\x01not json"), 0o600) }, stateCorrupt, "decoding"},
		{"cut short", func(t *testing.T, path string) {
			writeRaw(t, path, stateFileVersion, fresh, "")
			data, _ := os.ReadFile(path)
			os.WriteFile(path, data[:len(data)/2], 0o600)
		}, stateCorrupt, "decoding"},
		{"checksum", func(t *testing.T, path string) {
			writeRaw(t, path, stateFileVersion, fresh, strings.Repeat("0", 64))
		}, stateCorrupt, "checksum"},
		{"unknown field", func(t *testing.T, path string) {
			writeRaw(t, path, stateFileVersion, map[string]any{"node": "node-1", "written_at_unix_nano": t0.UnixNano(), "surprise": 1}, "")
		}, stateCorrupt, "surprise"},
		{"oversized", func(t *testing.T, path string) {
			os.WriteFile(path, bytes.Repeat([]byte(" "), maxStateFileBytes+1), 0o600)
		}, stateCorrupt, "larger than"},
		{"more entries than written", func(t *testing.T, path string) { writeRaw(t, path, stateFileVersion, tooMany, "") }, stateCorrupt, "more than"},
		{"invalid run", func(t *testing.T, path string) { writeRaw(t, path, stateFileVersion, badRun, "") }, stateCorrupt, "ICMP"},
		{"invalid dropped", func(t *testing.T, path string) { writeRaw(t, path, stateFileVersion, badDropped, "") }, stateCorrupt, "dropped-since"},
		{"no write time", func(t *testing.T, path string) {
			writeRaw(t, path, stateFileVersion, stateBody{Node: "node-1"}, "")
		}, stateCorrupt, "write time"},
		{"foreign version", func(t *testing.T, path string) { writeRaw(t, path, stateFileVersion+1, fresh, "") }, stateForeign, "version 2"},
		{"another node's", func(t *testing.T, path string) { writeRaw(t, path, stateFileVersion, otherNode, "") }, stateForeign, "node-2"},
		{"unreadable", func(t *testing.T, path string) { os.Mkdir(path, 0o700) }, stateUnreadable, "reading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			tc.write(t, path)
			c := &clock{now: t0.Add(10 * time.Second)}
			n := startNode(t, path, c)
			if got := n.sf.State(); got != tc.state {
				t.Fatalf("state %q, want %q\n%s", got, tc.state, n.logs)
			}
			if log := n.logs.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "not trusted") ||
				!strings.Contains(log, tc.err) || strings.Count(log, "\n") != 1 {
				t.Errorf("want one warning naming %q:\n%s", tc.err, log)
			}
			if len(n.meter.restored) != 0 || len(n.g.arrivals.droppedSince(time.Time{}, DefaultQuiet)) != 0 || n.g.kubeProxy.ever.Load() {
				t.Errorf("an untrusted file restored runs %v, dropped %v or kube-proxy seen", n.meter.restored, n.g.arrivals.droppedSince(time.Time{}, DefaultQuiet))
			}
			if tc.state == stateUnreadable {
				return // a directory is not replaced by a file: the writes fail, and say so
			}
			n.scrape(c.now)
			if got := n.sf.State(); got != tc.state {
				t.Errorf("after the first write: state %q, want %q kept for this process", got, tc.state)
			}
			if again := startNode(t, path, c); again.sf.State() != stateRestored {
				t.Errorf("the replaced file: %q, want restored\n%s", again.sf.State(), again.logs)
			}
		})
	}
}

// Entries older than the quiet period are dropped on load: a run whose latest attempt is older (relative to
// now, or to the file's write time when the clock went back), and every dropped-since time once the file
// itself is older (nobody looked meanwhile). kube-proxy seen lasts a day.
func TestStateFileDropsStaleEntries(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	run := func(port uint16, last time.Time) runEntry {
		return runEntry{Protocol: "TCP", Address: "0.0.0.0", Port: port, Attempts: 3, FirstSeen: last.Add(-time.Minute).UnixNano(),
			LastSeen: last.UnixNano(), ActiveSince: last.Add(-time.Minute).UnixNano(), WatchedSince: last.Add(-time.Hour).UnixNano()}
	}
	dropped := droppedEntry{Namespace: "kubelings", Service: "checkout", Port: "http", Protocol: "TCP", Family: "IPv4",
		Kind: "node_port", DestPort: 30090, Since: t0.Add(-time.Hour).UnixNano()}
	for _, tc := range []struct {
		name          string
		written, now  time.Time
		kubeProxySeen time.Time
		state         string
		runs          []uint16
		dropped       bool
		kubeProxy     bool
	}{
		{"fresh", t0, t0.Add(30 * time.Second), t0, stateRestored, []uint16{30001, 30002}, true, true},
		{"runs that ended meanwhile", t0, t0.Add(100 * time.Second), t0.Add(-23 * time.Hour), stateRestored, []uint16{30001}, true, true},
		{"file older than the quiet period", t0, t0.Add(DefaultQuiet + time.Second), t0.Add(-25 * time.Hour), stateExpired, nil, false, false},
		{"clock set back", t0, t0.Add(-time.Hour), t0, stateRestored, []uint16{30001, 30002}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			writeRaw(t, path, stateFileVersion, stateBody{Node: "node-1", WrittenAt: tc.written.UnixNano(),
				KubeProxySeenAt: tc.kubeProxySeen.UnixNano(),
				Runs:            []runEntry{run(30001, tc.written.Add(-time.Second)), run(30002, tc.written.Add(-time.Minute))},
				Dropped:         []droppedEntry{dropped}}, "")
			n := startNode(t, path, &clock{now: tc.now})
			if got := n.sf.State(); got != tc.state {
				t.Fatalf("state %q, want %q\n%s", got, tc.state, n.logs)
			}
			var ports []uint16
			for _, p := range []uint16{30001, 30002} {
				if _, ok := n.meter.restored[arrivals.NodeDest(arrivals.TCP, false, p)]; ok {
					ports = append(ports, p)
				}
			}
			if fmt.Sprint(ports) != fmt.Sprint(tc.runs) {
				t.Errorf("restored runs %v, want %v", ports, tc.runs)
			}
			if got := len(n.g.arrivals.droppedSince(time.Time{}, DefaultQuiet)) == 1; got != tc.dropped {
				t.Errorf("dropped-since restored %v, want %v", got, tc.dropped)
			}
			if got := n.g.kubeProxy.ever.Load(); got != tc.kubeProxy {
				t.Errorf("kube-proxy seen %v, want %v", got, tc.kubeProxy)
			}
		})
	}
}

// The file is written by scrapes, not per packet: a changed state at most every stateWriteInterval, an
// unchanged one again after stateRefreshInterval; nothing before a scrape decided; atomically (no temporary file
// left, stale ones removed at start); kept bounded; a failing write says so in the state metric.
func TestStateFileWrites(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	stale := filepath.Join(dir, ".state.json.123.tmp")
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: t0}
	n := startNode(t, path, c)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a killed exporter's temporary file is still there: %v", err)
	}
	written := func() int64 {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		var env stateEnvelope
		var b stateBody
		if err := json.Unmarshal(data, &env); err != nil || json.Unmarshal(env.State, &b) != nil {
			t.Fatalf("unreadable state file: %s", data)
		}
		return b.WrittenAt
	}
	// Before the API view answered: nothing is written (it would throw away what the file carries over).
	view := n.g.cfg.View.(*scrapetest.View)
	view.Err = kubeview.ErrNotSynced
	n.scrape(t0)
	if written() != 0 {
		t.Fatal("written before a scrape decided")
	}
	view.Err = nil
	n.scrape(t0)
	if written() != t0.UnixNano() {
		t.Fatal("the first scrape that decided did not write")
	}
	n.scrape(t0.Add(2 * time.Second)) // changed (new attempts), within the write interval
	if written() != t0.UnixNano() {
		t.Error("written twice within the write interval")
	}
	n.scrape(t0.Add(stateWriteInterval))
	if written() != t0.Add(stateWriteInterval).UnixNano() {
		t.Error("a changed state not written after the write interval")
	}
	// No new attempts: unchanged, written again only after the refresh interval.
	n.meter.Mu.Lock()
	n.meter.Now = t0.Add(stateWriteInterval + 10*time.Second)
	n.meter.Mu.Unlock()
	c.now = n.meter.Now
	n.g.Gather(context.Background())
	if written() != t0.Add(stateWriteInterval).UnixNano() {
		t.Error("an unchanged state written before the refresh interval")
	}
	c.now = t0.Add(stateWriteInterval + stateRefreshInterval)
	n.meter.Mu.Lock()
	n.meter.Now = c.now
	n.meter.Mu.Unlock()
	n.g.Gather(context.Background())
	if written() != c.now.UnixNano() {
		t.Error("an unchanged state not written again after the refresh interval")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files beside the state file: %v", entries)
	}

	// Bounded: the destinations seen most recently, at most maxStateEntries of them.
	snap := arrivals.Snapshot{Status: arrivals.StatusOK, Taken: t0}
	for i := range maxStateEntries + 10 {
		snap.Dests = append(snap.Dests, arrivals.DestCount{Dest: arrivals.NodeDest(arrivals.TCP, false, uint16(1+i)), Attempts: 1,
			LastSeen: t0.Add(-time.Duration(i) * time.Millisecond)})
	}
	b := n.g.stateBody(&snap, DefaultQuiet)
	if len(b.Runs) != maxStateEntries || b.Runs[len(b.Runs)-1].Port != maxStateEntries {
		t.Errorf("%d runs kept, the last port %d: want the %d seen most recently", len(b.Runs), b.Runs[len(b.Runs)-1].Port, maxStateEntries)
	}
	data, err := json.Marshal(b)
	if err != nil || len(data) > maxStateFileBytes {
		t.Errorf("a full state encodes to %d bytes (%v), over the %d a file may have", len(data), err, maxStateFileBytes)
	}

	// A write that fails says so; the state comes back when writing works again.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	n.scrape(c.now.Add(time.Minute))
	if got := n.sf.State(); got != stateWriteFailed || strings.Count(n.logs.String(), "writing the state file failed") != 1 {
		t.Errorf("after a failed write: state %q\n%s", got, n.logs)
	}
	n.scrape(c.now.Add(time.Minute + stateWriteInterval))
	if strings.Count(n.logs.String(), "writing the state file failed") != 1 {
		t.Errorf("a second failed write logged again:\n%s", n.logs)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n.scrape(c.now.Add(2 * time.Minute))
	if got := n.sf.State(); got != stateNew {
		t.Errorf("after a good write: state %q, want %q again", got, stateNew)
	}
}

// kube-proxy seen before a restart is kept in the file: a restarted exporter on a node whose kube-proxy is gone
// reads it as kube-proxy's, missing, never as a replacement.
func TestStateFileKeepsKubeProxySeen(t *testing.T) {
	t0 := time.Now()
	path := filepath.Join(t.TempDir(), "state.json")
	writeRaw(t, path, stateFileVersion, stateBody{Node: "node-1", WrittenAt: t0.UnixNano(), KubeProxySeenAt: t0.Add(-time.Hour).UnixNano()}, "")
	sf := OpenStateFile(StateFileConfig{Path: path, Node: "node-1"})
	view := &scrapetest.View{Snap: kubeview.Snapshot{Node: scrapetest.DualStackNode(), Services: []kubeview.ServiceState{scrapetest.NodePortService(0)}}}
	g := NewGatherer(GathererConfig{View: view, RuleReader: &scrapetest.Reader{Err: fmt.Errorf("reading: %w", kernelrules.ErrNoRules)},
		KubeProxyAddress: scrapetest.RefusedKubeProxy(t), Links: scrapetest.Links{"lo", "eth0", "cilium_host"}, ProbeTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), State: sf})
	if st := g.Gather(context.Background()); st.Dataplane != DataplaneKubeProxy {
		t.Errorf("dataplane %q after a restart on a node where kube-proxy was seen an hour ago, want kube-proxy", st.Dataplane)
	}
}

// BenchmarkStateFileWrite is one write of the state file (temp file, fsync, rename, directory fsync) with n runs
// and their dropped-since times: what a scrape pays at most every stateWriteInterval.
func BenchmarkStateFileWrite(b *testing.B) {
	for _, n := range []int{10, maxStateEntries} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			t0 := time.Unix(1_800_000_000, 0)
			var body stateBody
			for i := range n {
				body.Runs = append(body.Runs, runEntry{Protocol: "TCP", Address: "0.0.0.0", Port: uint16(1 + i), Attempts: 1000,
					FirstSeen: t0.UnixNano(), LastSeen: t0.UnixNano(), ActiveSince: t0.UnixNano(), WatchedSince: t0.UnixNano()})
				body.Dropped = append(body.Dropped, droppedEntry{Namespace: "kubelings", Service: fmt.Sprintf("checkout-%d", i), Port: "http",
					Protocol: "TCP", Family: "IPv4", Kind: "node_port", DestPort: int32(1 + i), Since: t0.UnixNano()})
			}
			path := filepath.Join(b.TempDir(), "state.json")
			for b.Loop() {
				if err := writeStateFile(path, body); err != nil {
					b.Fatal(err)
				}
			}
			if fi, err := os.Stat(path); err == nil {
				b.ReportMetric(float64(fi.Size()), "bytes")
			}
		})
	}
}

// What the meter learnt of a NodePort's sources survives a restart: the checkers' clocks (at most
// maxStateCheckers, their intervals and latest ticks) and the clients' repeated run, so the restarted meter takes
// those sources for checkers at once (arrivals, TestCheckersAcrossARestartSeeded) and reads only the clients'
// part of the run as lost. A run the meter told nothing about keeps neither, as before.
func TestStateFileCarriesCheckers(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	path := filepath.Join(t.TempDir(), "state.json")
	c := &clock{now: t0}
	before := startNode(t, path, c)
	checker := netip.MustParseAddr("198.18.0.5")
	count := arrivals.DestCount{Dest: restartNP, Attempts: 30, FirstSeen: t0.Add(-time.Minute), LastSeen: t0.Add(-time.Second),
		ActiveSince: t0.Add(-time.Minute), WatchedSince: t0.Add(-time.Hour), SetAside: true,
		Checkers: []arrivals.CheckerSource{
			{Addr: checker, Attempts: 28, Interval: 2 * time.Second, LastSeen: t0.Add(-time.Second), LastTick: t0.Add(-2 * time.Second)},
			{Addr: checker, Attempts: 28, Interval: 3 * time.Second, LastSeen: t0.Add(-time.Second), LastTick: t0.Add(-1500 * time.Millisecond)},
			{Addr: netip.MustParseAddr("198.18.0.6"), Attempts: 9, Interval: 5 * time.Second, LastSeen: t0.Add(-3 * time.Second)},
		},
		Clients: arrivals.ClientCount{Attempts: 2, ActiveSince: t0.Add(-20 * time.Second), LastSeen: t0.Add(-19 * time.Second),
			Repeated: arrivals.RepeatCount{Attempts: 2, ActiveSince: t0.Add(-20 * time.Second), LastSeen: t0.Add(-19 * time.Second)}}}
	before.meter.Mu.Lock()
	before.meter.Counts[restartNP] = count
	before.meter.Mu.Unlock()
	before.g.Gather(context.Background())
	before.g.SaveState()

	c.now = t0.Add(10 * time.Second)
	after := startNode(t, path, c)
	if got := after.sf.State(); got != stateRestored {
		t.Fatalf("restart: state %q, want %q\n%s", got, stateRestored, after.logs)
	}
	run := after.meter.restored[restartNP]
	if !run.Told || len(run.Checkers) != maxStateCheckers {
		t.Fatalf("restored run %+v: want it told, with %d checkers' clocks", run, maxStateCheckers)
	}
	for i, ch := range run.Checkers {
		w := count.Checkers[i]
		if ch.Addr != w.Addr || ch.Interval != w.Interval || !ch.LastTick.Equal(w.LastTick) {
			t.Errorf("restored checker %d: %+v, want %v every %s, its latest tick %v", i, ch, w.Addr, w.Interval, w.LastTick)
		}
	}
	if r := run.Clients; r.Attempts != 2 || !r.ActiveSince.Equal(t0.Add(-20*time.Second)) || !r.LastSeen.Equal(t0.Add(-19*time.Second)) {
		t.Errorf("restored clients' run %+v, want the 2 repeated attempts", r)
	}

	// A run the meter set nothing aside at: neither checkers nor a clients' part.
	after.meter.Mu.Lock()
	after.meter.Counts[restartNP] = arrivals.DestCount{Dest: restartNP, Attempts: 5, FirstSeen: c.now, LastSeen: c.now,
		ActiveSince: c.now, WatchedSince: c.now}
	after.meter.Mu.Unlock()
	after.g.Gather(context.Background())
	after.g.SaveState()
	again := startNode(t, path, c)
	if run := again.meter.restored[restartNP]; run.Told || run.Checkers != nil || run.Clients != (arrivals.RepeatCount{}) {
		t.Errorf("a run without sources set aside restored as %+v", run)
	}
}
