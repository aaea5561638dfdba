/* LD_PRELOAD'ed into the children of test_exit.py: a thread ended by
 * pthread_exit while the interpreter finalizes is a thread that tried to
 * take the GIL then (CPython 3.9-3.13 end such a thread so) — the bug,
 * whether or not this build happens to survive the forced unwind (the
 * release wheel segfaulted; a build without zig mostly did not). Report it
 * and exit 97 at once, before any unwinding. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

void pthread_exit(void *retval) {
    int (*finalizing)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    if (!finalizing)
        finalizing = (int (*)(void))dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
    if (finalizing && finalizing()) {
        static const char said[] = "exit_shim: a thread tried to take the GIL while the interpreter finalized "
                                   "(ended by pthread_exit)\n";
        (void)!write(2, said, sizeof said - 1);
        _exit(97);
    }
    void (*real)(void *) = (void (*)(void *))dlsym(RTLD_NEXT, "pthread_exit");
    real(retval);
    for (;;) {
    }
}
