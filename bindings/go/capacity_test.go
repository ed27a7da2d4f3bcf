package shardrec

// The capacity hints reach the library: a host collection accepts (and ignores) them, and a
// negative one is rejected with the library's message naming the fields.

import (
	"strings"
	"testing"
)

func TestCapacityHints(t *testing.T) {
	plan := testPlan(t, 1)
	defer plan.Close()
	comms, err := NewLocalGroup(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	coll, err := NewEmbeddingCollection(plan, comms[0], adagrad(),
		&EmbeddingOptions{MaxBatchSize: 64, MaxIdsPerBatch: 4096})
	if err != nil {
		t.Fatalf("hints on a host collection: %v", err)
	}
	coll.Close()
	coll, err = NewEmbeddingCollection(plan, comms[0], adagrad(),
		&EmbeddingOptions{MaxBatchSize: 64, MaxIdsPerBatch: -1})
	if err == nil {
		coll.Close()
		t.Fatal("a negative hint was accepted")
	}
	if !strings.Contains(err.Error(), "max_ids_per_batch") {
		t.Errorf("error does not name the field: %v", err)
	}
}
