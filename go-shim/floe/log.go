package floe

/*
#include <stdint.h>
#include <stddef.h>
#include "floe.h"

extern void floeGoLog(uint32_t level, uint8_t *msg, size_t n, void *user);

static floe_status floe_go_set_logger(uint32_t max_level, floe_error **err) {
	return floe_set_log_callback((void (*)(uint32_t, const uint8_t *, size_t, void *))floeGoLog, NULL, max_level, err);
}
*/
import "C"

import (
	"sync"
	"sync/atomic"
)

// LogLevel mirrors libfloe's log levels, most severe first.
type LogLevel uint32

const (
	LogError LogLevel = 1
	LogWarn  LogLevel = 2
	LogInfo  LogLevel = 3
	LogDebug LogLevel = 4
	LogTrace LogLevel = 5
)

var (
	logSink    atomic.Pointer[func(LogLevel, string)]
	logInstall sync.Once
	logErr     error
)

// SetLogger sends libfloe's log lines at maxLevel or more severe to sink, which must be
// safe to call from any goroutine. libfloe takes one callback per process: the first
// call installs it with its maxLevel; later calls only replace the sink.
func SetLogger(maxLevel LogLevel, sink func(LogLevel, string)) error {
	logSink.Store(&sink)
	logInstall.Do(func() {
		var cerr *C.floe_error
		if status := C.floe_go_set_logger(C.uint32_t(maxLevel), &cerr); status != C.FLOE_STATUS_OK {
			logErr = takeError(status, cerr)
		}
	})
	return logErr
}
