package kernelrules

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// sharedRead on its own: it shares one call, keeps what keep accepts for ttl,
// and knows nothing of what it runs. In a synctest bubble, synctest.Wait returns
// once every caller is blocked: "all ten joined the one call" and "the waiter
// is waiting" are then facts the test asserts, not what a sleep hoped for.
func TestSharedRead(t *testing.T) { synctest.Test(t, testSharedRead) }

func testSharedRead(t *testing.T) {
	now := time.Unix(0, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context) (int, error) {
		n := int(calls.Add(1))
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if n == 2 {
			return 0, errors.New("failed")
		}
		return n, nil
	}
	s := &sharedRead[int]{ttl: time.Second, now: clock, keep: func(_ int, err error) bool { return err == nil }}

	var wg sync.WaitGroup
	got := make([]int, 10)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _ = s.Do(context.Background(), fn) }()
	}
	synctest.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls in flight for 10 concurrent callers, want 1", n)
	}
	close(release)
	wg.Wait()
	for i, v := range got {
		if v != 1 {
			t.Errorf("caller %d got %d, want the one shared call's 1", i, v)
		}
	}
	if v, _ := s.Do(context.Background(), fn); v != 1 || calls.Load() != 1 {
		t.Errorf("within ttl: %d after %d calls, want 1 after 1", v, calls.Load())
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if _, err := s.Do(context.Background(), fn); err == nil {
		t.Error("second call's failure not returned")
	}
	if v, err := s.Do(context.Background(), fn); err != nil || v != 3 || calls.Load() != 3 {
		t.Errorf("a failure is not kept: got %d, %v after %d calls, want 3 after 3", v, err, calls.Load())
	}

	// A waiter outlives its leader's cancelled context and runs again.
	s = &sharedRead[int]{ttl: -1, now: clock, keep: func(int, error) bool { return true }}
	block := make(chan struct{})
	var runs atomic.Int32
	slow := func(ctx context.Context) (int, error) {
		runs.Add(1)
		select {
		case <-block:
			return 7, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() { _, err := s.Do(leaderCtx, slow); leaderErr <- err }()
	synctest.Wait()
	waiter := make(chan int, 1)
	go func() { v, _ := s.Do(context.Background(), slow); waiter <- v }()
	synctest.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs while the waiter waits, want the leader's 1", n)
	}
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v", err)
	}
	close(block)
	if v := <-waiter; v != 7 || runs.Load() != 2 {
		t.Errorf("waiter got %d after %d runs, want 7 after 2", v, runs.Load())
	}
}

// forget drops the kept result, and a call in flight that began before it is
// neither kept nor handed to a caller that came after: it runs the function
// again.
func TestSharedReadForget(t *testing.T) { synctest.Test(t, testSharedReadForget) }

func testSharedReadForget(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{}, 10)
	fn := func(ctx context.Context) (int, error) {
		n := int(calls.Add(1))
		<-release
		return n, nil
	}
	s := &sharedRead[int]{ttl: time.Hour, now: time.Now, keep: func(int, error) bool { return true }}
	release <- struct{}{}
	if v, _ := s.Do(context.Background(), fn); v != 1 {
		t.Fatalf("first call %d", v)
	}
	s.forget()
	release <- struct{}{}
	if v, _ := s.Do(context.Background(), fn); v != 2 {
		t.Errorf("after forget: %d, want a new call's 2", v)
	}
	// A call in flight, then forget, then a caller: it waits for the call in
	// flight and runs another.
	s.forget() // drops 2
	first := make(chan int, 1)
	go func() { v, _ := s.Do(context.Background(), fn); first <- v }()
	synctest.Wait() // the call is in flight
	s.forget()
	second := make(chan int, 1)
	go func() { v, _ := s.Do(context.Background(), fn); second <- v }()
	synctest.Wait()
	release <- struct{}{}
	release <- struct{}{}
	if v := <-first; v != 3 {
		t.Errorf("the call in flight: %d, want 3", v)
	}
	if v := <-second; v != 4 {
		t.Errorf("a caller after forget joined the call begun before it: got %d, want a new call's 4", v)
	}
	if v, _ := s.Do(context.Background(), fn); v != 4 || calls.Load() != 4 {
		t.Errorf("the call begun before forget was kept: %d after %d calls, want 4 after 4", v, calls.Load())
	}
}
