// The deprecated form of the earlier docs, TableConstraints{ShardingTypes: []int{...}}, still
// compiles in a program outside the package and plans exactly like []shardrec.ShardingType.
package shardrec_test

import (
	"testing"

	"shardrec.dev/shardrec"
)

// planJSON plans three tables on two ranks under constraints and returns the plan's JSON, its
// hash and how each table was sharded.
func planJSON(t *testing.T, constraints []shardrec.TableConstraints) (string, uint64, []int) {
	t.Helper()
	features := []shardrec.FeatureConfig{{Name: "f0"}, {Name: "f1"}, {Name: "f2"}}
	tables := []shardrec.TableConfig{
		{Name: "items", Rows: 500, Dim: 16, Features: []int32{0}},
		{Name: "shops", Rows: 60, Dim: 8, Features: []int32{1}},
		{Name: "ads", Rows: 90, Dim: 32, Features: []int32{2}},
	}
	plan, err := shardrec.NewPlan(tables, features, shardrec.Topology{WorldSize: 2}, constraints)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	text, err := plan.JSON()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := plan.Hash()
	if err != nil {
		t.Fatal(err)
	}
	var types []int
	for i := range tables {
		typ, _, err := plan.TableSharding(i)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, typ)
	}
	return text, hash, types
}

func TestDeprecatedIntShardingTypesPlanLikeTypedOnes(t *testing.T) {
	oldForm := []shardrec.TableConstraints{
		{Table: "items", ShardingTypes: []int{shardrec.RowWise}},
		{Table: "shops", ShardingTypes: []int{shardrec.TableWise}, Ranks: []int32{1}},
		{Table: "ads", ShardingTypes: []int{shardrec.ColumnWise}, Ranks: []int32{0, 1}},
	}
	newForm := []shardrec.TableConstraints{
		{Table: "items", ShardingTypes: []shardrec.ShardingType{shardrec.RowWise}},
		{Table: "shops", ShardingTypes: []shardrec.ShardingType{shardrec.TableWise}, Ranks: []int32{1}},
		{Table: "ads", ShardingTypes: []shardrec.ShardingType{shardrec.ColumnWise}, Ranks: []int32{0, 1}},
	}
	oldText, oldHash, oldTypes := planJSON(t, oldForm)
	newText, newHash, newTypes := planJSON(t, newForm)
	if oldText != newText || oldHash != newHash {
		t.Fatalf("the []int constraints planned differently:\n%s\nvs\n%s", oldText, newText)
	}
	want := []int{shardrec.RowWise, shardrec.TableWise, shardrec.ColumnWise}
	for i := range want {
		if oldTypes[i] != want[i] || newTypes[i] != want[i] {
			t.Errorf("table %d: sharded %d / %d, constrained to %d", i, oldTypes[i], newTypes[i],
				want[i])
		}
	}
}
