package shardrec

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// Topology.Calibrate through the Go binding: plausible figures written into the topology, a
// plan made with it prints them, and a bad argument errors without writing.
func TestCalibrateFillsTheTopology(t *testing.T) {
	topo := Topology{WorldSize: 2}
	c, err := topo.Calibrate(CalibrateOptions{RanksShareMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.GatherBandwidth < 1e8 || c.GatherBandwidth > 1e12 || c.Elapsed <= 0 || c.Elapsed > 60 {
		t.Fatalf("implausible calibration %+v", c)
	}
	// One host's ranks exchange on shared memory where the process can use it (else loopback
	// TCP), and rank threads wait on each other's hand-off.
	bw, latency := c.LoopbackBandwidth, c.LoopbackLatency
	if c.ShmUsed {
		bw, latency = c.ShmBandwidth, c.ShmLatency
	}
	if topo.MemoryBandwidth != c.GatherBandwidth || topo.IntraNodeBandwidth != bw ||
		math.Abs(topo.CollectiveLatency-(latency+c.HandoffLatency)) > 1e-15 ||
		topo.PerIDCost <= 0 {
		t.Fatalf("topology %+v does not carry calibration %+v", topo, c)
	}
	plan, err := NewPlan([]TableConfig{{Name: "t", Rows: 100, Dim: 8, Features: []int32{0}}},
		[]FeatureConfig{{Name: "f"}}, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	stats, err := plan.Stats()
	if err != nil || !strings.Contains(stats, "GiB/s") {
		t.Fatalf("stats %q, %v", stats, err)
	}

	bad := Topology{WorldSize: 1}
	if _, err := bad.Calibrate(CalibrateOptions{ThreadsPerRank: -1}); err == nil ||
		!strings.Contains(err.Error(), "threads_per_rank") || bad.MemoryBandwidth != 0 {
		t.Fatalf("bad options: err %v, topology %+v", err, bad)
	}
}

// Topology.FillFromComm: a local group of 4 (one host) gives world 4, 4 ranks per node, and
// leaves the other fields alone; a nil communicator errors without writing.
func TestFillFromCommTakesWorldAndLocalSize(t *testing.T) {
	onRanks(t, 4, func(rank int, c *Comm) error {
		topo := Topology{BatchSize: 256}
		if err := topo.FillFromComm(c); err != nil {
			return err
		}
		if topo.WorldSize != 4 || topo.RanksPerNode != 4 || topo.BatchSize != 256 {
			return fmt.Errorf("rank %d: topology %+v", rank, topo)
		}
		return nil
	})
	topo := Topology{WorldSize: 3}
	if err := topo.FillFromComm(nil); err == nil || !strings.Contains(err.Error(), "comm") ||
		topo.WorldSize != 3 {
		t.Fatalf("nil comm: err %v, topology %+v", err, topo)
	}
}

// CalibrateNetwork on one host (a local group): nothing crosses a network, so 0 and the topology
// unchanged; a negative budget is refused on every rank.
func TestCalibrateNetworkOnOneHostMeasuresNothing(t *testing.T) {
	onRanks(t, 2, func(rank int, c *Comm) error {
		topo := Topology{WorldSize: 2, InterNodeBandwidth: 123}
		got, err := topo.CalibrateNetwork(c, 0.2)
		if err != nil || got != 0 || topo.InterNodeBandwidth != 123 {
			return fmt.Errorf("rank %d: %v %v %+v", rank, got, err, topo)
		}
		if _, err := topo.CalibrateNetwork(c, -1); CodeOf(err) != ErrCodeInvalid ||
			!strings.Contains(err.Error(), "time_budget") {
			return fmt.Errorf("rank %d: a negative budget gave %v", rank, err)
		}
		return nil
	})
}
