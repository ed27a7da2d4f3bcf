// Custom rendezvous stores: shardrec_comm_create_with_store with callbacks into a Go Store
// (the C trampolines are in store_callbacks.c). Hand-written, not generated.
package swig

/*
#include <stdint.h>
#include <stdlib.h>
#include "shardrec/comm.h"
int32_t sr_go_comm_create_with_store(shardrec_comm_t** out, uintptr_t handle, int32_t world_size,
                                     int32_t rank, const shardrec_comm_options_t* options,
                                     char** message);
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// Store is the Go form of shardrec_store_callbacks_t; the public package documents it.
type Store interface {
	Set(key string, value []byte) error
	Get(key string, timeoutMs int64) ([]byte, error)
}

// storeStatus is the status a store error reports: an *Error's code, else SHARDREC_ERROR.
func storeStatus(err error) C.int32_t {
	if e, ok := err.(*Error); ok && e.Code < 0 {
		return C.int32_t(e.Code)
	}
	return -1
}

//export srGoStoreSet
func srGoStoreSet(h C.uintptr_t, key *C.char, value unsafe.Pointer, n C.size_t) (rc C.int32_t) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	s := cgo.Handle(h).Value().(Store)
	var v []byte
	if n > 0 {
		v = C.GoBytes(value, C.int(n))
	} else {
		v = []byte{}
	}
	if err := s.Set(C.GoString(key), v); err != nil {
		return storeStatus(err)
	}
	return 0
}

//export srGoStoreGet
func srGoStoreGet(h C.uintptr_t, key *C.char, timeoutMs C.int64_t, buf unsafe.Pointer,
	bufLen C.size_t, valueLen *C.size_t) (rc C.int32_t) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	s := cgo.Handle(h).Value().(Store)
	v, err := s.Get(C.GoString(key), int64(timeoutMs))
	if err != nil {
		return storeStatus(err)
	}
	*valueLen = C.size_t(len(v))
	if buf != nil && len(v) > 0 && int(bufLen) >= len(v) {
		copy(unsafe.Slice((*byte)(buf), len(v)), v)
	}
	return 0
}

// CommCreateWithStore creates a communicator whose rendezvous calls store. The store is kept
// for the rest of the process: a C communicator (and its splits) may call it after every Go
// handle is gone (collections and meshes keep theirs).
func CommCreateWithStore(out []uintptr, store Store, worldSize, rank int, options Comm_options) error {
	h := cgo.NewHandle(store)
	var opts *C.shardrec_comm_options_t
	if options != nil {
		opts = (*C.shardrec_comm_options_t)(unsafe.Pointer(options.Swigcptr()))
	}
	var raw *C.shardrec_comm_t
	var msg *C.char
	rc := C.sr_go_comm_create_with_store(&raw, C.uintptr_t(h), C.int32_t(worldSize),
		C.int32_t(rank), opts, &msg)
	if rc < 0 {
		m := ""
		if msg != nil {
			m = C.GoString(msg)
			C.free(unsafe.Pointer(msg))
		}
		return &Error{Code: int(rc), Message: m}
	}
	out[0] = uintptr(unsafe.Pointer(raw))
	return nil
}
