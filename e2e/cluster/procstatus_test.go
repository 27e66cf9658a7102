package cluster

import (
	"os"
	"testing"
)

// TestReadProcStatus reads this test process's own memory: resident now, a peak at least as high, and the
// anonymous and file-backed parts that make it up (procfs gives bytes: more than a megabyte for any Go binary).
func TestReadProcStatus(t *testing.T) {
	st, err := ReadProcStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.VmRSS < 1<<20 || st.VmHWM < st.VmRSS || st.RssAnon <= 0 || st.RssFile <= 0 || st.RssAnon+st.RssFile > st.VmRSS {
		t.Fatalf("implausible status %+v", st)
	}
	if _, err := ReadProcStatus(-1); err == nil {
		t.Fatal("status of pid -1 read without error")
	}
}
