/*
 * A stand-in for NVIDIA's libnvidia-ml.so.1, for tests on machines without a GPU.
 *
 * The real pynvml (nvidia-ml-py) loads this library exactly as it loads the driver's, so the
 * agent's whole NVML path runs for real; only the "GPU" is invented. It exports the functions the
 * agent calls, with the signatures of nvml.h (driver 550+), and answers from a scenario file.
 *
 * Scenario: the file named by the environment variable FAKE_NVML_CONFIG, re-read whenever it is
 * replaced (tests write a new file and rename it over the old one between collections). One
 * setting per line, "key value"; "key@N value" applies to GPU N only and wins over "key value".
 * A value may be a status instead of a number: ns (NOT_SUPPORTED), lost (GPU_IS_LOST), nf
 * (FUNCTION_NOT_FOUND), noperm (NO_PERMISSION), unknown (UNKNOWN).
 *
 *   init ok|driver_not_loaded|library_not_found     nvmlInit result
 *   gpus N                                          device count (default 4)
 *   lost@N 1                                        every call for GPU N returns GPU_IS_LOST
 *   pci_when_lost@N 1                               ... except nvmlDeviceGetPciInfo, which still answers
 *   sleep@N MS                                      every call for GPU N first sleeps MS milliseconds
 *                                                   (a hung driver call: the scenario is read when the
 *                                                   call starts, so a sleeping call finishes its sleep)
 *   bus@N 0x3b                                      PCI bus number (default 0x10 * (N + 1))
 *   util_gpu, util_mem, memory, temp, fan, power, power_limit, sm_clock, mem_clock,
 *   pcie_rx, pcie_tx, encoder, decoder, ecc_corrected, ecc_uncorrected, reasons,
 *   mem_total, mem_used, mem_reserved             override one reading (memory: ns only)
 *   mig@N 1                                         MIG mode on: two MIG devices, GPU
 *                                                   utilisation NOT_SUPPORTED
 *   proc GPU PID BYTES                              a compute process
 *   sample GPU PID TIMESTAMP SM MEM                 a process utilisation sample
 *   xid GPU CODE                                    an XID event, delivered once per file load
 *   sleep_ms N                                      every device call first sleeps N ms, as a driver
 *                                                   call stuck in the kernel would (sleep_ms@N: GPU N)
 *   status@N STATUS                                 every call for GPU N returns STATUS (e.g. unknown: a
 *                                                   board that answers "Unknown Error" to everything)
 *   count_status STATUS                             nvmlDeviceGetCount fails with STATUS
 *   handle@N STATUS                                 nvmlDeviceGetHandleByIndex(N) and ByPciBusId fail so
 *   uuid_status@N STATUS, name_status@N STATUS,     that identity call of GPU N fails so
 *   pci_status@N STATUS
 *   uuid_gen@N G                                    GPU N's UUID carries generation G (a board swapped or
 *                                                   reset with a new identity): GPU-fa4e0000-0000-4000-8000-
 *                                                   GGGGNNNNNNNN, G and N in decimal (default G 0)
 *   name_hex@N HEX, uuid_hex@N HEX, pci_hex@N HEX   the raw bytes of GPU N's name, UUID or PCI bus id, or of
 *   driver_hex HEX                                  the driver version (e.g. not valid UTF-8, or with
 *                                                   control bytes; cut to the caller's buffer)
 *   power_max, sm_clock_max, mem_clock_max,         the device's own limits: the most power its limit may be
 *   pcie_gen, pcie_width                            set to (mW), the highest clocks (MHz), the PCIe link's
 *                                                   generation and lane count (H100 SXM defaults)
 *
 * Build: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 fake_nvml.c
 * Leave a function out with -DOMIT_<function name>, as an old driver would.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4,
    NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, TIMEOUT = 10,
    LIBRARY_NOT_FOUND = 12, FUNCTION_NOT_FOUND = 13, GPU_IS_LOST = 15, UNKNOWN = 999,
};

#define MAX_GPUS 16
#define MAX_MIG 2
#define MAX_LINES 256

typedef struct fake_device { int index; int mig; } *nvmlDevice_t;  /* mig: -1 for the GPU itself */
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned pid; unsigned long long timeStamp; unsigned smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId; } nvmlEventData_t;
typedef void *nvmlEventSet_t;

static struct fake_device devices[MAX_GPUS];
static struct fake_device mig_devices[MAX_GPUS][MAX_MIG];
/* The scenario, parsed. A table is never changed once published: the agent calls the library from
 * several threads at once (the collection and the NVML XID event watcher; ctypes drops the GIL), so
 * a reload builds a new table and swaps the pointer, and a call that is reading the old table goes
 * on reading a whole one. Replaced tables are not freed (a call may still hold one); a test process
 * reloads at most a few hundred times, 32 KiB each. Before: a reload emptied the one shared table
 * before refilling it, and a call in another thread that read it in between saw no settings at all
 * (status@1 unknown read as a healthy GPU on a loaded CI machine). */
struct table {
    int n_lines;
    char keys[MAX_LINES][32];
    char values[MAX_LINES][96];
};
static struct table empty_table;
static struct table *current = &empty_table;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stat loaded;
static int xid_queue[MAX_LINES][2];
static int xid_head, xid_tail;
static int event_set_token;

/* The table in force now (a whole one, never one being filled). */
static const struct table *scenario(void) { return __atomic_load_n(&current, __ATOMIC_ACQUIRE); }

static void publish(struct table *t) { __atomic_store_n(&current, t, __ATOMIC_RELEASE); }

/* Read the scenario file again if it changed since the last read (one thread at a time). */
static void reload_locked(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        if (loaded.st_ino) { publish(&empty_table); memset(&loaded, 0, sizeof loaded); }
        return;
    }
    if (st.st_ino == loaded.st_ino && st.st_mtim.tv_nsec == loaded.st_mtim.tv_nsec &&
        st.st_mtim.tv_sec == loaded.st_mtim.tv_sec && st.st_size == loaded.st_size)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    struct table *t = calloc(1, sizeof *t);
    if (!t) { fclose(f); return; }
    loaded = st;
    char line[160];
    while (t->n_lines < MAX_LINES && fgets(line, sizeof line, f)) {
        char key[32], value[96] = "";
        if (line[0] == '#' || sscanf(line, "%31s %95[^\n]", key, value) < 1) continue;
        strcpy(t->keys[t->n_lines], key);
        strcpy(t->values[t->n_lines], value);
        if (strcmp(key, "xid") == 0 && xid_tail < MAX_LINES) {
            sscanf(value, "%d %d", &xid_queue[xid_tail][0], &xid_queue[xid_tail][1]);
            xid_tail++;
        }
        t->n_lines++;
    }
    fclose(f);
    publish(t);
}

static void load(void) {
    pthread_mutex_lock(&load_lock);
    reload_locked();
    pthread_mutex_unlock(&load_lock);
}

/* The value of key for GPU gpu ("key@gpu" first, then "key"), or NULL. */
static const char *setting(const char *key, int gpu) {
    char scoped[48];
    snprintf(scoped, sizeof scoped, "%s@%d", key, gpu);
    const struct table *t = scenario();
    for (int i = 0; i < t->n_lines; i++) if (strcmp(t->keys[i], scoped) == 0) return t->values[i];
    for (int i = 0; i < t->n_lines; i++) if (strcmp(t->keys[i], key) == 0) return t->values[i];
    return NULL;
}

static nvmlReturn_t status_word(const char *v) {
    if (!v) return OK;
    if (!strcmp(v, "ns")) return NOT_SUPPORTED;
    if (!strcmp(v, "lost")) return GPU_IS_LOST;
    if (!strcmp(v, "nf")) return FUNCTION_NOT_FOUND;
    if (!strcmp(v, "noperm")) return NO_PERMISSION;
    if (!strcmp(v, "unknown")) return UNKNOWN;
    return OK;
}

/* Read setting key for gpu into *out (default dflt); a status word is returned instead. */
static nvmlReturn_t reading(const char *key, int gpu, unsigned long long dflt, unsigned long long *out) {
    const char *v = setting(key, gpu);
    nvmlReturn_t st = status_word(v);
    if (st != OK) return st;
    *out = v ? strtoull(v, NULL, 0) : dflt;
    return OK;
}

static int gpu_count(void) {
    unsigned long long n = 4;
    reading("gpus", -1, 4, &n);
    return n > MAX_GPUS ? MAX_GPUS : (int)n;
}

/* sleep_ms: hold the calling thread in C (GIL released by ctypes) for that long. */
static void stall(int gpu) {
    const char *v = setting("sleep_ms", gpu);
    long ms = v ? strtol(v, NULL, 0) : 0;
    if (ms > 0) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0) {}
    }
}

static int is_mig(int gpu) { const char *v = setting("mig", gpu); return v && atoi(v) == 1; }

static void sleep_for(int gpu) {
    const char *v = setting("sleep", gpu);
    long ms = v ? atol(v) : 0;
    if (ms > 0) { struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L }; nanosleep(&ts, NULL); }
}

static int is_lost(int gpu) { const char *v = setting("lost", gpu); return v && atoi(v) == 1; }

static unsigned long long bus_of(int gpu) {
    unsigned long long bus = 0x10 * (gpu + 1);
    reading("bus", gpu, bus, &bus);
    return bus;
}

/* status@N: what every call for GPU N answers (OK when unset). */
static nvmlReturn_t every_call(int gpu) { return status_word(setting("status", gpu)); }

/* Every device call starts here: reload the scenario, check the handle, honour sleep@N, lost@N and status@N. */
#define DEVICE(dev) \
    load(); \
    if (!(dev) || (dev)->index < 0 || (dev)->index >= gpu_count()) return INVALID_ARGUMENT; \
    sleep_for((dev)->index); \
    stall((dev)->index); \
    if (is_lost((dev)->index)) return GPU_IS_LOST; \
    if (every_call((dev)->index) != OK) return every_call((dev)->index); \
    const int gpu = (dev)->index; (void)gpu

/* Decode hex digits into out (at most size - 1 bytes, NUL-terminated); the number of bytes. */
static int unhex(const char *hex, char *out, unsigned size) {
    unsigned n = 0;
    while (hex[0] && hex[1] && n + 1 < size) {
        unsigned byte;
        if (sscanf(hex, "%2x", &byte) != 1) break;
        out[n++] = (char)byte;
        hex += 2;
    }
    out[n] = 0;
    return (int)n;
}

/* A string setting: raw bytes from key_hex@N when set (1), else 0. */
static int raw_text(const char *key, int gpu, char *out, unsigned size) {
    const char *v = setting(key, gpu);
    if (!v) return 0;
    unhex(v, out, size);
    return 1;
}

static nvmlReturn_t read_uint(const char *key, int gpu, unsigned long long dflt, unsigned *out) {
    unsigned long long v;
    nvmlReturn_t st = reading(key, gpu, dflt, &v);
    if (st == OK) *out = (unsigned)v;
    return st;
}

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    load();
    const char *v = setting("init", -1);
    if (v && !strcmp(v, "driver_not_loaded")) return DRIVER_NOT_LOADED;
    if (v && !strcmp(v, "library_not_found")) return LIBRARY_NOT_FOUND;
    for (int i = 0; i < MAX_GPUS; i++) {
        devices[i].index = i; devices[i].mig = -1;
        for (int m = 0; m < MAX_MIG; m++) { mig_devices[i][m].index = i; mig_devices[i][m].mig = m; }
    }
    return OK;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case GPU_IS_LOST: return "GPU is lost";
    case FUNCTION_NOT_FOUND: return "Function Not Found";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NOT_FOUND: return "Not Found";
    case TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    load();
    if (raw_text("driver_hex", -1, version, length)) return OK;
    snprintf(version, length, "550.54.15-fake");
    return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    load();
    nvmlReturn_t st = status_word(setting("count_status", -1));
    if (st != OK) return st;
    *count = (unsigned)gpu_count();
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    load();
    if ((int)index >= gpu_count()) return INVALID_ARGUMENT;
    nvmlReturn_t st = status_word(setting("handle", (int)index));
    if (st != OK) return st;
    *device = &devices[index];
    return OK;
}

/* By "dddddddd:bb:dd.f" or "dddd:bb:dd.f" (any case), as the driver accepts it. */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    load();
    unsigned domain, bus, slot, fn;
    if (!bus_id || sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &fn) != 4) return INVALID_ARGUMENT;
    for (int i = 0; i < gpu_count(); i++) {
        if (bus_of(i) != bus) continue;
        sleep_for(i);
        if (is_lost(i)) return GPU_IS_LOST;
        nvmlReturn_t st = status_word(setting("handle", i));
        if (st != OK) return st;
        *device = &devices[i];
        return OK;
    }
    return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned length) {
    DEVICE(dev);
    nvmlReturn_t st = status_word(setting("name_status", gpu));
    if (st != OK) return st;
    if (dev->mig < 0 && raw_text("name_hex", gpu, name, length)) return OK;
    snprintf(name, length, dev->mig < 0 ? "Fake H100 80GB HBM3 (test stand-in)" : "MIG 3g.40gb");
    return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned length) {
    DEVICE(dev);
    nvmlReturn_t st = status_word(setting("uuid_status", gpu));
    if (st != OK) return st;
    unsigned long long generation = 0;
    reading("uuid_gen", gpu, 0, &generation);
    if (dev->mig < 0 && raw_text("uuid_hex", gpu, uuid, length)) return OK;
    if (dev->mig < 0) snprintf(uuid, length, "GPU-fa4e0000-0000-4000-8000-%04llu%08d", generation % 10000, gpu);
    else snprintf(uuid, length, "MIG-fa4e0000-0000-4000-8000-00000000%02d%02d", gpu, dev->mig);
    return OK;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    load();
    if (!dev || dev->index < 0 || dev->index >= gpu_count()) return INVALID_ARGUMENT;
    sleep_for(dev->index);
    if (is_lost(dev->index) && !(setting("pci_when_lost", dev->index) && atoi(setting("pci_when_lost", dev->index)) == 1))
        return GPU_IS_LOST;
    const int gpu = dev->index;
    if (every_call(gpu) != OK) return every_call(gpu);
    nvmlReturn_t st = status_word(setting("pci_status", gpu));
    if (st != OK) return st;
    unsigned long long bus = 0x10 * (gpu + 1);
    reading("bus", gpu, bus, &bus);
    memset(pci, 0, sizeof *pci);
    pci->bus = (unsigned)bus;
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02llX:00.0", bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02llX:00.0", bus);
    raw_text("pci_hex", gpu, pci->busId, sizeof pci->busId);
    return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    DEVICE(dev);
    if (is_mig(gpu) && !setting("util_gpu", gpu)) return NOT_SUPPORTED;
    nvmlReturn_t st = read_uint("util_gpu", gpu, 75, &u->gpu);
    return st != OK ? st : read_uint("util_mem", gpu, 30, &u->memory);
}

static nvmlReturn_t memory(nvmlDevice_t dev, unsigned long long *total, unsigned long long *reserved,
                           unsigned long long *used) {
    const int gpu = dev->index;
    nvmlReturn_t st = status_word(setting("memory", gpu));
    if (st != OK) return st;
    if (dev->mig >= 0) { *total = 40ULL << 30; *reserved = 0; *used = (unsigned long long)(dev->mig + 1) << 30; return OK; }
    if ((st = reading("mem_total", gpu, 80ULL << 30, total)) != OK) return st;
    if ((st = reading("mem_reserved", gpu, 512ULL << 20, reserved)) != OK) return st;
    return reading("mem_used", gpu, 10ULL << 30, used);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    DEVICE(dev);
    unsigned long long total, reserved, used;
    nvmlReturn_t st = memory(dev, &total, &reserved, &used);
    if (st != OK) return st;
    m->total = total; m->used = used + reserved; m->free = total - used - reserved;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    DEVICE(dev);
    unsigned long long total, reserved, used;
    nvmlReturn_t st = memory(dev, &total, &reserved, &used);
    if (st != OK) return st;
    m->total = total; m->reserved = reserved; m->used = used; m->free = total - used - reserved;
    return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned *t) {
    DEVICE(dev);
    return sensor != 0 ? NOT_SUPPORTED : read_uint("temp", gpu, 45, t);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned *mw) { DEVICE(dev); return read_uint("power", gpu, 350000, mw); }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned *mw) { DEVICE(dev); return read_uint("power_limit", gpu, 700000, mw); }

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned *mhz) {
    DEVICE(dev);
    if (type == 1) return read_uint("sm_clock", gpu, 1980, mhz);
    if (type == 2) return read_uint("mem_clock", gpu, 2619, mhz);
    return NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t dev, unsigned *min_mw, unsigned *max_mw) {
    DEVICE(dev);
    nvmlReturn_t st = read_uint("power_min", gpu, 200000, min_mw);
    return st != OK ? st : read_uint("power_max", gpu, 700000, max_mw);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned *mhz) {
    DEVICE(dev);
    if (type == 1) return read_uint("sm_clock_max", gpu, 1980, mhz);
    if (type == 2) return read_uint("mem_clock_max", gpu, 2619, mhz);
    return NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned *generation) {
    DEVICE(dev);
    return read_uint("pcie_gen", gpu, 5, generation);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t dev, unsigned *width) {
    DEVICE(dev);
    return read_uint("pcie_width", gpu, 16, width);
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t dev, unsigned *speed) { DEVICE(dev); return read_uint("fan", gpu, 40, speed); }

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t dev, int counter, unsigned *kbps) {
    DEVICE(dev);
    return counter == 0 ? read_uint("pcie_tx", gpu, 2000, kbps) : read_uint("pcie_rx", gpu, 1000, kbps);
}

#ifndef OMIT_nvmlDeviceGetEncoderUtilization
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t dev, unsigned *util, unsigned *period_us) {
    DEVICE(dev);
    *period_us = 167000;
    return read_uint("encoder", gpu, 0, util);
}
#endif

#ifndef OMIT_nvmlDeviceGetDecoderUtilization
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t dev, unsigned *util, unsigned *period_us) {
    DEVICE(dev);
    *period_us = 167000;
    return read_uint("decoder", gpu, 5, util);
}
#endif

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type, unsigned long long *count) {
    DEVICE(dev);
    (void)counter_type;
    return error_type == 0 ? reading("ecc_corrected", gpu, 2, count) : reading("ecc_uncorrected", gpu, 0, count);
}

#ifndef OMIT_nvmlDeviceGetCurrentClocksEventReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *reasons) {
    DEVICE(dev);
    return reading("reasons", gpu, 0x4, reasons);
}
#endif

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *reasons) {
    DEVICE(dev);
    return reading("reasons", gpu, 0x4, reasons);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned *current, unsigned *pending) {
    DEVICE(dev);
    *current = *pending = (unsigned)is_mig(gpu);
    return OK;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t dev, unsigned *count) {
    DEVICE(dev);
    *count = is_mig(gpu) ? 7 : 0;
    return OK;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t dev, unsigned index, nvmlDevice_t *mig) {
    DEVICE(dev);
    if (!is_mig(gpu)) return NOT_SUPPORTED;
    if (index >= MAX_MIG) return NOT_FOUND;
    *mig = &mig_devices[gpu][index];
    return OK;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t dev, unsigned *id) {
    DEVICE(dev);
    if (dev->mig < 0) return NOT_SUPPORTED;
    *id = (unsigned)(1 + dev->mig);
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t dev, unsigned *id) {
    DEVICE(dev);
    if (dev->mig < 0) return NOT_SUPPORTED;
    *id = 0;
    return OK;
}

static nvmlReturn_t processes(nvmlDevice_t dev, const char *key, unsigned *count, nvmlProcessInfo_t *infos) {
    DEVICE(dev);
    unsigned n = 0;
    const struct table *t = scenario();
    for (int i = 0; i < t->n_lines; i++) {
        int g; unsigned pid; unsigned long long bytes;
        if (strcmp(t->keys[i], key) || sscanf(t->values[i], "%d %u %llu", &g, &pid, &bytes) != 3 || g != gpu) continue;
        if (infos && n < *count) {
            infos[n].pid = pid; infos[n].usedGpuMemory = bytes;
            infos[n].gpuInstanceId = 0xFFFFFFFF; infos[n].computeInstanceId = 0xFFFFFFFF;
        }
        n++;
    }
    if (n == 0) { *count = 0; return OK; }
    if (!infos || n > *count) { *count = n; return INSUFFICIENT_SIZE; }
    *count = n;
    return OK;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos) {
    return processes(dev, "proc", count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev, unsigned *count, nvmlProcessInfo_t *infos) {
    return processes(dev, "gproc", count, infos);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev, nvmlProcessUtilizationSample_t *samples,
                                             unsigned *count, unsigned long long last_seen) {
    DEVICE(dev);
    (void)last_seen;  /* like the drivers in scenario 5: old samples may come back */
    unsigned n = 0;
    const struct table *t = scenario();
    for (int i = 0; i < t->n_lines; i++) {
        int g; unsigned pid, sm, mem; unsigned long long ts;
        if (strcmp(t->keys[i], "sample") || sscanf(t->values[i], "%d %u %llu %u %u", &g, &pid, &ts, &sm, &mem) != 5 || g != gpu) continue;
        if (samples && n < *count) {
            samples[n].pid = pid; samples[n].timeStamp = ts; samples[n].smUtil = sm; samples[n].memUtil = mem;
            samples[n].encUtil = samples[n].decUtil = 0;
        }
        n++;
    }
    if (n == 0) return NOT_FOUND;
    if (!samples || n > *count) { *count = n; return INSUFFICIENT_SIZE; }
    *count = n;
    return OK;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { *set = &event_set_token; return OK; }
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return OK; }

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set) {
    DEVICE(dev);
    (void)types; (void)set;
    return OK;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    (void)set; (void)timeout_ms;
    pthread_mutex_lock(&load_lock);
    reload_locked();
    int queued = xid_head < xid_tail, g = 0, code = 0;
    if (queued) { g = xid_queue[xid_head][0]; code = xid_queue[xid_head][1]; xid_head++; }
    pthread_mutex_unlock(&load_lock);
    if (!queued) return TIMEOUT;
    memset(data, 0, sizeof *data);
    data->device = &devices[g < 0 || g >= MAX_GPUS ? 0 : g];
    data->eventType = 0x8;  /* nvmlEventTypeXidCriticalError */
    data->eventData = (unsigned long long)code;
    return OK;
}
