// A tensor buffer or shape the Go binding refuses on one rank fails the collective forward or
// backward on every rank in the same call, and the ranks stay in step: the refusing rank gets
// its own error, the others EINVAL naming it, and the step that follows trains as if nothing had
// been refused. A nil batch, a nil shape and a negative NumFeatures are refused the same way.
package shardrec

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// refusedTogether runs call on this rank: rank bad refuses its arguments and must get EINVAL;
// the other must get EINVAL naming rank bad.
func refusedTogether(t *testing.T, rank, bad int, call func(refused bool) error) {
	err := call(rank == bad)
	if CodeOf(err) != ErrCodeInvalid {
		t.Errorf("rank %d: want EINVAL, got %v", rank, err)
	} else if rank != bad && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", bad)) {
		t.Errorf("rank %d: the error does not name rank %d: %v", rank, bad, err)
	}
}

func TestRefusedTensorsFailEveryRankAndKeepTheRanksInStep(t *testing.T) {
	_, single := singleRank(t, 1)
	results := onTwoRanks(t, func(rank int, coll *EmbeddingCollection) [][]float32 {
		k := batch(0, rank, 1)
		dim, err := coll.OutputDim()
		if err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return nil
		}
		need := int(k.BatchSize) * int(dim)
		shape := []int64{k.BatchSize, dim}
		// A shape of one more row than the buffer on rank 1, then a negative extent on rank 0.
		refusedTogether(t, rank, 1, func(bad bool) error {
			if bad {
				return coll.ForwardTensor(k, make([]float32, need), []int64{k.BatchSize + 1, dim})
			}
			return coll.ForwardTensor(k, make([]float32, need), shape)
		})
		refusedTogether(t, rank, 0, func(bad bool) error {
			if bad {
				return coll.ForwardTensor(k, make([]float32, need), []int64{-1, dim})
			}
			return coll.ForwardTensor(k, make([]float32, need), shape)
		})
		// A nil shape on rank 1 (never read as a scalar) and a negative NumFeatures on rank 0
		// (never a huge size_t): refused naming them, and on the peer in the same call.
		refusedTogether(t, rank, 1, func(bad bool) error {
			if bad {
				err := coll.ForwardTensor(k, make([]float32, need), nil)
				if err == nil || !strings.Contains(err.Error(), "shape must not be nil") {
					t.Errorf("rank 1: a nil shape gave %v", err)
				}
				return err
			}
			return coll.ForwardTensor(k, make([]float32, need), shape)
		})
		refusedTogether(t, rank, 0, func(bad bool) error {
			if bad {
				neg := *k
				neg.NumFeatures = -1
				err := coll.Forward(&neg, make([]float32, need))
				if err == nil || !strings.Contains(err.Error(), "NumFeatures must be >= 0, got -1") {
					t.Errorf("rank 0: a negative NumFeatures gave %v", err)
				}
				return err
			}
			return coll.Forward(k, make([]float32, need))
		})
		// A nil batch on rank 1 (Forward, ForwardTensor, ForwardAlloc, the pipelined start): its
		// own error on rank 1, never a panic, and the peer learns of it in the same call.
		refusedTogether(t, rank, 1, func(bad bool) error {
			if bad {
				err := coll.Forward(nil, make([]float32, need))
				if err == nil || !strings.Contains(err.Error(), "nil") {
					t.Errorf("rank 1: a nil batch gave %v", err)
				}
				return err
			}
			return coll.Forward(k, make([]float32, need))
		})
		refusedTogether(t, rank, 1, func(bad bool) error {
			if bad {
				return coll.ForwardTensor(nil, make([]float32, need), shape)
			}
			return coll.ForwardTensor(k, make([]float32, need), shape)
		})
		refusedTogether(t, rank, 0, func(bad bool) error {
			if bad {
				_, err := coll.ForwardAlloc(nil)
				return err
			}
			_, err := coll.ForwardAlloc(k)
			return err
		})
		refusedTogether(t, rank, 0, func(bad bool) error {
			if bad {
				return coll.InputDistStart(nil)
			}
			if err := coll.InputDistStart(k); err != nil {
				return err
			}
			return coll.InputDistWait()
		})
		out := make([]float32, need)
		if err := coll.ForwardTensor(k, out, shape); err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return nil
		}
		for i := range out {
			out[i] /= float32(k.BatchSize)
		}
		// The gradient one float short of its shape on rank 1.
		refusedTogether(t, rank, 1, func(bad bool) error {
			if bad {
				return coll.BackwardTensor(out[:need-1], shape)
			}
			return coll.BackwardTensor(out, shape)
		})
		if err := coll.BackwardTensor(out, shape); err != nil {
			t.Errorf("rank %d: %v", rank, err)
			return nil
		}
		return trainSteps(t, coll, 0, rank, 1)
	})
	if t.Failed() {
		return
	}
	for i, name := range tableNames {
		for j, want := range single[i] {
			got := results[0][i][j]
			if math.Abs(float64(got-want)) > 1e-5*math.Max(1, math.Abs(float64(want))) {
				t.Fatalf("%s[%d]: after the refusals %g, one rank on both batches %g", name, j, got, want)
			}
		}
	}
}
