// Launching from the environment, aborting from another goroutine and the warning for a leaked
// handle, through the Go binding.
package shardrec

import (
	"bytes"
	"log"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var launcherVars = []string{"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
	"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID"}

func TestCommFromEnvAndLocalRank(t *testing.T) {
	for _, v := range launcherVars {
		t.Setenv(v, "") // empty counts as unset
	}
	if _, err := NewCommFromEnv(nil); CodeOf(err) != ErrCodeNotFound {
		t.Fatalf("want ErrCodeNotFound without launcher variables, got %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
		"MASTER_PORT": strconv.Itoa(port), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"} {
		t.Setenv(k, v)
	}
	c, err := NewCommFromEnv(&CommOptions{TimeoutMs: 10000, StoreGraceMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lr, err1 := c.LocalRank()
	ls, err2 := c.LocalSize()
	if err1 != nil || err2 != nil || lr != 0 || ls != 1 {
		t.Fatal(lr, ls, err1, err2)
	}
	group, err := NewLocalGroup(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range group {
		if lr, err := g.LocalRank(); err != nil || lr != r {
			t.Fatal(r, lr, err)
		}
		defer g.Close()
	}
}

func TestAbortUnblocksABarrier(t *testing.T) {
	group, err := NewLocalGroup(2, &CommOptions{TimeoutMs: 30000})
	if err != nil {
		t.Fatal(err)
	}
	defer group[0].Close()
	defer group[1].Close()
	done := make(chan error)
	go func() { done <- group[0].Barrier() }() // rank 1 never joins
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := group[0].Abort(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; CodeOf(err) != ErrCodeAborted {
		t.Fatalf("want ErrCodeAborted, got %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the barrier returned %v after the abort", took)
	}
}

// A watchdog goroutine aborting while the owner closes: Close waits for the aborts in flight,
// and an abort after Close is an error, never a use of the destroyed handle (this crashed or
// corrupted the heap in about half the runs of 300 rounds before Close waited).
func TestAbortRacingCloseIsSafe(t *testing.T) {
	for round := 0; round < 300; round++ {
		group, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := group[0]
		var wg sync.WaitGroup
		wg.Add(1)
		started := make(chan struct{})
		go func() {
			defer wg.Done()
			close(started)
			for i := 0; i < 50; i++ {
				if err := c.Abort(); err != nil && CodeOf(err) != ErrCodeInvalid {
					t.Errorf("round %d: abort: %v", round, err)
					return
				}
			}
		}()
		<-started
		c.Close()
		wg.Wait()
		if err := c.Abort(); CodeOf(err) != ErrCodeInvalid {
			t.Fatalf("abort after close: %v, want ErrCodeInvalid", err)
		}
	}
}

func TestALeakedCommIsClosedWithAWarning(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	saved := leakLog
	leakLog = log.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), "", 0)
	defer func() { leakLog = saved }()
	func() {
		group, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = group // dropped without Close
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		got := buf.String()
		mu.Unlock()
		if strings.Contains(got, "shardrec.Comm ") {
			if !strings.Contains(got, "without Close") {
				t.Fatal(got)
			}
			return
		}
	}
	t.Fatal("no warning for the leaked communicator")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// BindLocalNuma reaches shardrec_comm_bind_local_numa: local rank 0 gets node 0 on any host.
func TestBindLocalNumaFirstRankGetsNodeZero(t *testing.T) {
	group, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer group[0].Close()
	node, err := group[0].BindLocalNuma()
	if err != nil || node != 0 {
		t.Fatal(node, err)
	}
}
