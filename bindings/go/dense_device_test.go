// The MLP's device and math options through the Go binding.

package shardrec

import (
	"errors"
	"strings"
	"testing"
)

func TestCudaMLPOnAMissingDeviceIsNoDevice(t *testing.T) {
	// Ordinal 1000 exists on no machine; a CPU-only build answers ErrCodeUnsupported.
	m, err := NewMLPOn(3, []int64{4, 1}, nil, 7, "m", DeviceCUDA, 1000, DenseMathTF32)
	if m != nil || err == nil {
		t.Fatalf("want an error, got mlp %v err %v", m, err)
	}
	var e *Error
	if !errors.As(err, &e) || (e.Code != ErrCodeNoDevice && e.Code != ErrCodeUnsupported) {
		t.Fatalf("want ErrCodeNoDevice, got %v", err)
	}
}

func TestReducedPrecisionOnTheHostIsInvalid(t *testing.T) {
	_, err := NewMLPOn(3, []int64{4, 1}, nil, 7, "m", DeviceHost, 0, DenseMathBF16)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrCodeInvalid ||
		!strings.Contains(e.Message, "SHARDREC_DEVICE_CUDA") {
		t.Fatalf("want ErrCodeInvalid naming CUDA, got %v", err)
	}
}

func TestDenseMathValuesAndHostDevice(t *testing.T) {
	if DenseMathFP32 != 0 || DenseMathTF32 != 1 || DenseMathBF16 != 2 {
		t.Fatal("DenseMath values differ from shardrec/dense.h")
	}
	m, err := NewMLPOn(3, []int64{4, 1}, nil, 7, "m", DeviceHost, 0, DenseMathFP32)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Device() != DeviceHost {
		t.Fatalf("device %v", m.Device())
	}
}

// A batch whose sizes wrap around int64 is refused before C: the backward's C call takes no
// lengths, so wrapped length checks let empty slices through to a crash.
func TestDotInteractionRefusesABatchWhoseSizesWrap(t *testing.T) {
	none := []float32{}
	err := DotInteractionBackward(none, none, none, 1<<62, 7, 4, none, none)
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("backward: want EINVAL naming the overflow, got %v", err)
	}
	err = DotInteractionForward(none, none, 1<<62, 7, 4, none)
	if CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "overflows") {
		t.Fatalf("forward: want EINVAL naming the overflow, got %v", err)
	}
}
