// NewCommMPI reaches shardrec_comm_create_mpi: its option checks and error codes, without
// initialising MPI in the test process (the MPI runs themselves are tests/capi/mpi, under mpirun).
package shardrec

import (
	"strings"
	"testing"
)

func TestNewCommMPIChecksItsOptions(t *testing.T) {
	c, err := NewCommMPI(0, &CommOptions{Backend: BackendNCCL})
	if c != nil || CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "SHARDREC_BACKEND_MPI") {
		t.Fatalf("NCCL backend: %v, %v", c, err)
	}
	c, err = NewCommMPI(0, &CommOptions{Backend: BackendMPI, DeviceType: DeviceCUDA})
	if c != nil || CodeOf(err) != ErrCodeUnsupported || !strings.Contains(err.Error(), "host memory only") {
		t.Fatalf("CUDA device: %v, %v", c, err)
	}
	id, err := NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c, err = NewComm(id, 1, 0, &CommOptions{Backend: BackendMPI})
	if c != nil || CodeOf(err) != ErrCodeInvalid || !strings.Contains(err.Error(), "shardrec_comm_create_mpi") {
		t.Fatalf("MPI backend through a unique id: %v, %v", c, err)
	}
}
