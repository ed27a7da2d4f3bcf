// Owned C handles and the lock that keeps Close from destroying one under a call in flight.

package shardrec

import (
	"sort"
	"sync"
	"unsafe"
)

// handleRef is the C handle an owning type holds. Every method holds the read side of mu for
// its whole C call (calls never wait for each other), Close takes the write side (take): Close
// from any goroutine therefore waits for the calls in flight, and the calls after it find
// handle 0, which the C API refuses with SHARDREC_EINVAL ("... must not be NULL", to which the
// swig package adds that the object is nil or was closed).
//
// A method must release its read lock before it calls another method of the same object (or
// acquire everything it needs in one acquireAll): sync.RWMutex blocks new readers while a
// writer waits, so a second read lock of the same object taken while a Close waits would never
// be granted. Nothing that holds a read lock calls Close.
type handleRef struct {
	mu sync.RWMutex
	h  uintptr
}

// noRelease is the release func of a nil object, which holds no lock.
func noRelease() {}

// acquire returns the handle (0 for a nil r) with its read lock held, and the func that
// releases it: h, done := x.ref().acquire(); defer done(). The func refers to the object, so
// the object (and its finalizer) stays alive until it runs.
func (r *handleRef) acquire() (uintptr, func()) {
	if r == nil {
		return 0, noRelease
	}
	r.mu.RLock()
	return r.h, r.mu.RUnlock
}

// take is Close's part: it waits for the calls in flight, then returns the handle and leaves 0
// for the calls after it. The caller destroys the handle it returns (when not 0).
func (r *handleRef) take() uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	r.h = 0
	return h
}

// acquireAll is acquire over the handles of several objects (a nil ref gives 0), in the order
// given, for a call that passes them together (a mesh and its collection, an optimizer and its
// layers). Each distinct ref is read-locked once, in address order: an object named twice, or
// two calls naming the same objects in another order, cannot deadlock with a Close waiting on
// one of them.
func acquireAll(refs ...*handleRef) ([]uintptr, func()) {
	distinct := make([]*handleRef, 0, len(refs))
	for _, r := range refs {
		if r != nil {
			distinct = append(distinct, r)
		}
	}
	sort.Slice(distinct, func(i, j int) bool {
		return uintptr(unsafe.Pointer(distinct[i])) < uintptr(unsafe.Pointer(distinct[j]))
	})
	var locked []*handleRef
	for _, r := range distinct {
		if len(locked) == 0 || locked[len(locked)-1] != r {
			r.mu.RLock()
			locked = append(locked, r)
		}
	}
	handles := make([]uintptr, len(refs))
	for i, r := range refs {
		if r != nil {
			handles[i] = r.h
		}
	}
	return handles, func() {
		for i := len(locked) - 1; i >= 0; i-- {
			locked[i].mu.RUnlock()
		}
	}
}

// closedArgument refuses an optional handle argument that was given but is closed: a nil one
// means "none" to C (NULL), and a closed one, whose handle is 0 too, must not silently mean the
// same (a closed Bucketer would leave a backward's gradients unsynchronised).
func closedArgument(name string, r *handleRef, h uintptr) error {
	if r != nil && h == 0 {
		return &Error{Code: ErrCodeInvalid, Message: name + " was closed"}
	}
	return nil
}
