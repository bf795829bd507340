package floe

/*
#include <stdint.h>
#include <stddef.h>
*/
import "C"

import "unsafe"

// floeGoLog is the C callback libfloe calls with each log line (any thread).
//
//export floeGoLog
func floeGoLog(level C.uint32_t, msg *C.uint8_t, n C.size_t, _ unsafe.Pointer) {
	sink := logSink.Load()
	if sink == nil {
		return
	}
	(*sink)(LogLevel(level), C.GoStringN((*C.char)(unsafe.Pointer(msg)), C.int(n)))
}
