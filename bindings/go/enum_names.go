// Names of the binding's enumerations: each type's String gives the name of its constant, so
// fmt's %v prints OptimizerAdam instead of 3 (%d still prints the number), and a value no
// constant has prints as Type(value).

package shardrec

import "strconv"

// enumName is names[v], or typ(v) when v has no name.
func enumName(typ string, v int64, names []string) string {
	if v >= 0 && v < int64(len(names)) {
		return names[v]
	}
	return typ + "(" + strconv.FormatInt(v, 10) + ")"
}

var backendNames = []string{
	"BackendAuto", "BackendGloo", "BackendNCCL", "BackendMPI",
}

// String gives the constant's name (Backend(n) for a value without one).
func (b Backend) String() string {
	return enumName("Backend", int64(b), backendNames)
}

var reduceOpNames = []string{
	"ReduceSum", "ReduceAvg", "ReduceMax", "ReduceMin",
}

// String gives the constant's name (ReduceOp(n) for a value without one).
func (r ReduceOp) String() string {
	return enumName("ReduceOp", int64(r), reduceOpNames)
}

var compressionNames = []string{
	"CompressionNone", "CompressionBF16",
}

// String gives the constant's name (Compression(n) for a value without one).
func (c Compression) String() string {
	return enumName("Compression", int64(c), compressionNames)
}

var activationNames = []string{
	"ActivationNone", "ActivationReLU", "ActivationSigmoid",
}

// String gives the constant's name (Activation(n) for a value without one).
func (a Activation) String() string {
	return enumName("Activation", int64(a), activationNames)
}

var denseMathNames = []string{
	"DenseMathFP32", "DenseMathTF32", "DenseMathBF16",
}

// String gives the constant's name (DenseMath(n) for a value without one).
func (d DenseMath) String() string {
	return enumName("DenseMath", int64(d), denseMathNames)
}

var denseStateNames = []string{
	"DenseMomentum1", "DenseMomentum2",
}

// String gives the constant's name (DenseState(n) for a value without one).
func (d DenseState) String() string {
	return enumName("DenseState", int64(d), denseStateNames)
}

var evictionNames = []string{
	"EvictionNone", "EvictionLRU", "EvictionLFU", "EvictionTTL", "EvictionScore",
}

// String gives the constant's name (Eviction(n) for a value without one).
func (e Eviction) String() string {
	return enumName("Eviction", int64(e), evictionNames)
}

var optimizerTypeNames = []string{
	"OptimizerSGD", "OptimizerAdagrad", "OptimizerRowwiseAdagrad", "OptimizerAdam",
	"OptimizerPartialRowwiseAdam", "OptimizerLAMB",
}

// String gives the constant's name (OptimizerType(n) for a value without one).
func (o OptimizerType) String() string {
	return enumName("OptimizerType", int64(o), optimizerTypeNames)
}

var weightDecayModeNames = []string{
	"WeightDecayNone", "WeightDecayL2", "WeightDecayDecoupled",
}

// String gives the constant's name (WeightDecayMode(n) for a value without one).
func (w WeightDecayMode) String() string {
	return enumName("WeightDecayMode", int64(w), weightDecayModeNames)
}

var boundsPolicyNames = []string{
	"BoundsError", "BoundsClamp", "BoundsSkip",
}

// String gives the constant's name (BoundsPolicy(n) for a value without one).
func (b BoundsPolicy) String() string {
	return enumName("BoundsPolicy", int64(b), boundsPolicyNames)
}

var commEncodingNames = []string{
	"CommEncodingFP32", "CommEncodingFP16", "CommEncodingBF16", "CommEncodingFP8E4M3",
	"CommEncodingFP8E5M2",
}

// String gives the constant's name (CommEncoding(n) for a value without one).
func (c CommEncoding) String() string {
	return enumName("CommEncoding", int64(c), commEncodingNames)
}

var nonFinitePolicyNames = []string{
	"NonFiniteCheck", "NonFiniteAllow",
}

// String gives the constant's name (NonFinitePolicy(n) for a value without one).
func (n NonFinitePolicy) String() string {
	return enumName("NonFinitePolicy", int64(n), nonFinitePolicyNames)
}

var tableMemoryNames = []string{
	"TableMemoryHugePages", "TableMemorySmallPages",
}

// String gives the constant's name (TableMemory(n) for a value without one).
func (t TableMemory) String() string {
	return enumName("TableMemory", int64(t), tableMemoryNames)
}

var servingStorageNames = []string{
	"ServingAsTrained", "ServingFP32", "ServingFP16", "ServingBF16", "ServingInt8",
	"ServingInt4", "ServingFP8E4M3", "ServingFP8E5M2",
}

// String gives the constant's name (ServingStorage(n) for a value without one).
func (s ServingStorage) String() string {
	return enumName("ServingStorage", int64(s), servingStorageNames)
}

var meshLayoutNames = []string{
	"MeshLayoutDefault", "MeshLayoutInterHost",
}

// String gives the constant's name (MeshLayout(n) for a value without one).
func (m MeshLayout) String() string {
	return enumName("MeshLayout", int64(m), meshLayoutNames)
}

var syncModeNames = []string{
	"SyncDefault", "SyncWeightsAndState", "SyncWeightsOnly",
}

// String gives the constant's name (SyncMode(n) for a value without one).
func (s SyncMode) String() string {
	return enumName("SyncMode", int64(s), syncModeNames)
}

var poolingNames = []string{
	"PoolingSum", "PoolingMean", "PoolingNone",
}

// String gives the constant's name (Pooling(n) for a value without one).
func (p Pooling) String() string {
	return enumName("Pooling", int64(p), poolingNames)
}

var initKindNames = []string{
	"InitDefault", "InitUniform", "InitConstant",
}

// String gives the constant's name (InitKind(n) for a value without one).
func (i InitKind) String() string {
	return enumName("InitKind", int64(i), initKindNames)
}

var dTypeNames = []string{
	"DTypeFloat32", "DTypeFloat16", "DTypeBFloat16", "DTypeFloat64", "DTypeInt32",
	"DTypeInt64", "DTypeUint8", "DTypeFP8E4M3", "DTypeFP8E5M2",
}

// String gives the constant's name (DType(n) for a value without one).
func (d DType) String() string {
	return enumName("DType", int64(d), dTypeNames)
}

var deviceTypeNames = []string{
	"DeviceHost", "DeviceCUDA",
}

// String gives the constant's name (DeviceType(n) for a value without one).
func (d DeviceType) String() string {
	return enumName("DeviceType", int64(d), deviceTypeNames)
}
