// Quantized communication through the Go binding: two-rank runs with bf16 and FP8 collectives stay
// close to the exact single-rank run (and differs from it, so the option reached the library),
// and an unknown encoding is rejected by the library with its message.
package shardrec

import (
	"math"
	"strings"
	"sync"
	"testing"
)

func TestBF16CommunicationTrainsCloseToExact(t *testing.T) {
	// bf16 gradients (relative 2^-8) through Adagrad: well inside 1e-2 of the step size.
	trainsCloseToExact(t, CommEncodingBF16, 1e-2)
}

func TestFP8CommunicationTrainsCloseToExact(t *testing.T) {
	// FP8 E4M3 values (relative 2^-4) through Adagrad: inside 1e-1 of the values.
	trainsCloseToExact(t, CommEncodingFP8E4M3, 1e-1)
}

func trainsCloseToExact(t *testing.T, encoding CommEncoding, rel float64) {
	const steps = 2
	plan1 := testPlan(t, 1)
	defer plan1.Close()
	comms1, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms1[0].Close()
	coll1, err := NewEmbeddingCollection(plan1, comms1[0], adagrad(), &EmbeddingOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer coll1.Close()
	single := trainSteps(t, coll1, steps, 0, 2)

	plan2 := testPlan(t, 2)
	defer plan2.Close()
	comms, err := NewLocalGroup(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	results := make([][][]float32, 2)
	timings := make([]StepTimings, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			opts := &EmbeddingOptions{Seed: 7, ForwardCommEncoding: encoding,
				BackwardCommEncoding: encoding}
			coll, err := NewEmbeddingCollection(plan2, comms[rank], adagrad(), opts)
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			defer coll.Close()
			results[rank] = trainSteps(t, coll, steps, rank, 1)
			timings[rank], err = coll.StepTimings()
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
			}
		}(r)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	differs := false
	for i, name := range tableNames {
		for j, want := range single[i] {
			got := results[0][i][j]
			if math.Abs(float64(got-want)) > rel*math.Max(0.1, math.Abs(float64(want))) {
				t.Fatalf("%s[%d]: %v %g, exact %g", name, j, encoding, got, want)
			}
			differs = differs || got != want
		}
	}
	if !differs {
		t.Errorf("%v communication changed nothing: the option did not reach the library", encoding)
	}
	if timings[0].EmbeddingCommSeconds <= 0 ||
		timings[0].EmbeddingCommSeconds > timings[0].CollectiveSeconds {
		t.Errorf("embedding comm %g s of %g s collective", timings[0].EmbeddingCommSeconds,
			timings[0].CollectiveSeconds)
	}
}

func TestUnknownCommEncodingIsRejected(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	coll, err := NewEmbeddingCollection(plan, comms[0], adagrad(),
		&EmbeddingOptions{BackwardCommEncoding: CommEncoding(9)})
	if err == nil {
		coll.Close()
		t.Fatal("an unknown encoding was accepted")
	}
	if !strings.Contains(err.Error(), "backward_comm_encoding") {
		t.Errorf("error does not name the field: %v", err)
	}
}
