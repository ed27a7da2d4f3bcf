// Example: two ranks (goroutines) train a sharded embedding collection on synthetic data with
// the Go binding and print the loss of every step.
package main

import (
	"fmt"
	"log"
	"math/rand"
	"sync"

	"shardrec.dev/shardrec"
)

// readmeSample is the Go sample of docs/bindings.md: plan, create, one forward/backward step.
func readmeSample() (float64, error) {
	// readme:go:begin
	features := []shardrec.FeatureConfig{{Name: "user"}}
	tables := []shardrec.TableConfig{{Name: "users", Rows: 1000, Dim: 16, Features: []int32{0}}}
	plan, err := shardrec.NewPlan(tables, features, shardrec.Topology{WorldSize: 1}, nil)
	if err != nil {
		return 0, err
	}
	defer plan.Close()
	comms, err := shardrec.NewLocalGroup(1, nil)
	if err != nil {
		return 0, err
	}
	defer comms[0].Close()
	coll, err := shardrec.NewEmbeddingCollection(plan, comms[0], nil, nil)
	if err != nil {
		return 0, err
	}
	defer coll.Close()
	batch := &shardrec.KJT{BatchSize: 2, NumFeatures: 1,
		Lengths: []int32{2, 1}, Values: []int64{3, 7, 999}}
	out := make([]float32, 2*16)
	if err := coll.Forward(batch, out); err != nil { // err is a *shardrec.Error
		return 0, err
	}
	if err := coll.Backward(out); err != nil { // gradient of 0.5 * |out|^2
		return 0, err
	}
	// readme:go:end
	loss := 0.0
	for _, v := range out {
		loss += 0.5 * float64(v) * float64(v)
	}
	return loss, nil
}

func trainRank(plan *shardrec.Plan, comm *shardrec.Comm, rank, steps int) (float64, error) {
	opt := shardrec.DefaultOptimizer()
	opt.Type = shardrec.OptimizerAdagrad
	opt.LearningRate = 0.05
	coll, err := shardrec.NewEmbeddingCollection(plan, comm, &opt, &shardrec.EmbeddingOptions{Seed: 42})
	if err != nil {
		return 0, err
	}
	defer coll.Close()
	rng := rand.New(rand.NewSource(int64(1234 + rank)))
	const batchSize = 64
	loss := 0.0
	for step := 0; step < steps; step++ {
		k := &shardrec.KJT{BatchSize: batchSize, NumFeatures: 2}
		for _, rows := range []int64{5000, 300} {
			for b := 0; b < batchSize; b++ {
				n := 1 + rng.Intn(3)
				k.Lengths = append(k.Lengths, int32(n))
				for j := 0; j < n; j++ {
					k.Values = append(k.Values, rng.Int63n(rows))
				}
			}
		}
		out, err := coll.ForwardAlloc(k)
		if err != nil {
			return 0, err
		}
		grad := make([]float32, len(out))
		loss = 0
		for i, v := range out {
			loss += 0.5 * float64(v) * float64(v) / batchSize
			grad[i] = v / batchSize
		}
		if err := coll.Backward(grad); err != nil {
			return 0, err
		}
		if rank == 0 {
			fmt.Printf("step %d loss %.6f\n", step, loss)
		}
	}
	// Step time and samples/s of this rank, from the collection's own timings.
	if t, err := coll.StepTimings(); err == nil && rank == 0 && t.Forwards > 0 {
		fmt.Printf("rank 0: %.2f ms per step (input dist %.2f, lookup %.2f, output dist %.2f, "+
			"backward %.2f), %.0f samples/s\n", 1e3*t.TotalSeconds/float64(t.Forwards),
			1e3*t.InputDistSeconds/float64(t.Forwards), 1e3*t.LookupSeconds/float64(t.Forwards),
			1e3*t.OutputDistSeconds/float64(t.Forwards), 1e3*t.BackwardSeconds/float64(t.Forwards),
			t.SamplesPerSecond())
	}
	return loss, nil
}

func main() {
	features := []shardrec.FeatureConfig{{Name: "item"}, {Name: "shop"}}
	tables := []shardrec.TableConfig{
		{Name: "items", Rows: 5000, Dim: 32, Features: []int32{0}},
		{Name: "shops", Rows: 300, Dim: 16, Features: []int32{1}},
	}
	constraints := []shardrec.TableConstraints{
		{Table: "items", ShardingTypes: []shardrec.ShardingType{shardrec.RowWise}},
		{Table: "shops", ShardingTypes: []shardrec.ShardingType{shardrec.TableWise}, Ranks: []int32{1}},
	}
	// The plan is made for the optimizer the collections train with (Adagrad).
	topo := shardrec.Topology{WorldSize: 2, BatchSize: 64, Optimizer: shardrec.OptimizerAdagrad}
	plan, err := shardrec.NewPlan(tables, features, topo, constraints)
	if err != nil {
		log.Fatal(err)
	}
	defer plan.Close()
	comms, err := shardrec.NewLocalGroup(2, nil)
	if err != nil {
		log.Fatal(err)
	}
	losses := make([]float64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(rank int) {
			defer wg.Done()
			losses[rank], errs[rank] = trainRank(plan, comms[rank], rank, 5)
		}(r)
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	for _, err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("final loss %.6f (rank 0), %.6f (rank 1)\n", losses[0], losses[1])
	loss, err := readmeSample()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("readme sample loss %.6f\n", loss)
}
