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
	got := leakWarning(t, func() {
		group, err := NewLocalGroup(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = group // dropped without Close
	}, "shardrec.Comm ")
	if !strings.Contains(got, "without Close") {
		t.Fatal(got)
	}
}

// leakWarning runs leak (which drops a handle without Close) with the leak log captured, and
// collects garbage until the log holds want (returning the log), failing after 5 seconds.
func leakWarning(t *testing.T, leak func(), want string) string {
	t.Helper()
	var buf bytes.Buffer
	var mu sync.Mutex
	saved := leakLog
	leakLog = log.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), "", 0)
	defer func() { leakLog = saved }()
	leak()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		got := buf.String()
		mu.Unlock()
		if strings.Contains(got, want) {
			return got
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("no leak warning holding %q; the log holds %q", want, buf.String())
	return ""
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

// NewCommTCP: rank 0's address handed in code. Two ranks on goroutines meet (rank 0 saying
// localhost) with stale launcher variables set, and bad arguments are refused naming them.
func TestNewCommTCPMeetsAtTheAddressGivenInCode(t *testing.T) {
	for k, v := range map[string]string{"RANK": "7", "WORLD_SIZE": "9", "MASTER_ADDR": "no-such-host.invalid"} {
		t.Setenv(k, v) // leftovers: the arguments win
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, addr := range []string{"localhost", "127.0.0.1"} {
		wg.Add(1)
		go func(r int, addr string) {
			defer wg.Done()
			comms[r], errs[r] = NewCommTCP(addr, port, r, 2, &CommOptions{TimeoutMs: 20000, StoreGraceMs: 2000})
		}(r, addr)
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	for r := range comms {
		size, err1 := comms[r].Size()
		rank, err2 := comms[r].Rank()
		ls, err3 := comms[r].LocalSize()
		if err1 != nil || err2 != nil || err3 != nil || size != 2 || rank != r || ls != 2 {
			t.Fatal(r, size, rank, ls, err1, err2, err3)
		}
	}
	for _, r := range []int{1, 0} { // rank 0 hosts the store: closed last
		if err := comms[r].Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		addr              string
		port, rank, world int
		named             string
	}{{"", 29500, 0, 1, "addr"}, {"a\x00b", 29500, 0, 1, "addr"}, {"127.0.0.1", 0, 0, 1, "port"},
		{"127.0.0.1", 29500, 2, 2, "rank"}, {"127.0.0.1", 1 << 40, 0, 1, "port"}} {
		if _, err := NewCommTCP(c.addr, c.port, c.rank, c.world, nil); CodeOf(err) != ErrCodeInvalid ||
			!strings.Contains(err.Error(), c.named) {
			t.Errorf("%+v: want ErrCodeInvalid naming %s, got %v", c, c.named, err)
		}
	}
}
