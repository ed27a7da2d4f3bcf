// The enumerations print as their constants' names, and a value without a name as Type(value).
package shardrec

import (
	"fmt"
	"strings"
	"testing"
)

func TestEnumNames(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{fmt.Sprint(OptimizerAdam), "OptimizerAdam"},
		{fmt.Sprintf("%v", EvictionLFU), "EvictionLFU"},
		{fmt.Sprintf("%d", EvictionLFU), "2"},
		{DTypeUint8.String(), "DTypeUint8"},
		{ServingInt4.String(), "ServingInt4"},
		{BackendMPI.String(), "BackendMPI"},
		{SyncWeightsOnly.String(), "SyncWeightsOnly"},
		{OptimizerType(9).String(), "OptimizerType(9)"},
		{Pooling(-1).String(), "Pooling(-1)"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// Every constant of every enumeration has its own name.
	all := map[string][]fmt.Stringer{
		"Backend":     {BackendAuto, BackendGloo, BackendNCCL, BackendMPI},
		"ReduceOp":    {ReduceSum, ReduceAvg, ReduceMax, ReduceMin},
		"Compression": {CompressionNone, CompressionBF16},
		"Activation":  {ActivationNone, ActivationReLU, ActivationSigmoid},
		"DenseMath":   {DenseMathFP32, DenseMathTF32, DenseMathBF16},
		"DenseState":  {DenseMomentum1, DenseMomentum2},
		"Eviction":    {EvictionNone, EvictionLRU, EvictionLFU, EvictionTTL, EvictionScore},
		"OptimizerType": {OptimizerSGD, OptimizerAdagrad, OptimizerRowwiseAdagrad, OptimizerAdam,
			OptimizerPartialRowwiseAdam, OptimizerLAMB},
		"WeightDecayMode": {WeightDecayNone, WeightDecayL2, WeightDecayDecoupled},
		"BoundsPolicy":    {BoundsError, BoundsClamp, BoundsSkip},
		"CommEncoding": {CommEncodingFP32, CommEncodingFP16, CommEncodingBF16, CommEncodingFP8E4M3,
			CommEncodingFP8E5M2},
		"NonFinitePolicy": {NonFiniteCheck, NonFiniteAllow},
		"TableMemory":     {TableMemoryHugePages, TableMemorySmallPages},
		"ServingStorage": {ServingAsTrained, ServingFP32, ServingFP16, ServingBF16, ServingInt8,
			ServingInt4, ServingFP8E4M3, ServingFP8E5M2},
		"MeshLayout": {MeshLayoutDefault, MeshLayoutInterHost},
		"SyncMode":   {SyncDefault, SyncWeightsAndState, SyncWeightsOnly},
		"Pooling":    {PoolingSum, PoolingMean, PoolingNone},
		"InitKind":   {InitDefault, InitUniform, InitConstant},
		"DType": {DTypeFloat32, DTypeFloat16, DTypeBFloat16, DTypeFloat64, DTypeInt32, DTypeInt64,
			DTypeUint8, DTypeFP8E4M3, DTypeFP8E5M2},
		"DeviceType": {DeviceHost, DeviceCUDA},
	}
	for typ, values := range all {
		seen := map[string]bool{}
		for _, v := range values {
			name := v.String()
			if seen[name] || strings.HasPrefix(name, typ+"(") {
				t.Errorf("%s: %q repeats or is no constant's name", typ, name)
			}
			seen[name] = true
		}
	}
}
