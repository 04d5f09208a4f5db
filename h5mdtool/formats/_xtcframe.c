/*
 * A bounds-checked decoder of one GROMACS XTC frame, written for h5mdtool from the format's
 * description (GROMACS reference manual, "xtc" file format; the coordinate compression of
 * F. van Hoesel's xdrf library).
 *
 * A frame is big-endian XDR: magic 1995, atom count, step, time, the 3x3 box, the atom
 * count again; frames of up to 9 atoms then hold 3 * n plain floats. Larger frames hold
 * the precision (integers per nm), the integer box (minimum then maximum of x, y, z), the
 * initial size index into the table below, the byte count of the compressed stream, and
 * the stream, padded to a multiple of 4 bytes.
 *
 * The stream is read bit by bit, most significant bit first. Each step decodes one atom
 * exactly: its three integers, offset from the box minimum, either as one number of
 * bit_length(sx * sy * sz) bits (s = maximum - minimum + 1, mixed radix x, y, z) or, when
 * a size exceeds 2^24 - 1, as three numbers of bit_length(s) bits each. Then one flag bit;
 * when it is set, 5 bits give a run length (a multiple of 3: the coordinates of the next
 * run / 3 atoms) plus a change of the size index (run % 3 - 1). Without the flag the
 * previous run length holds. Each atom of the run is three integers of `index` bits in
 * radix table[index], each the difference to the previous atom plus table[index] / 2. The
 * first atom of a run is stored before the atom it follows (water: O after H1 in the
 * stream, O first in the frame). After the run the size index moves by the change.
 *
 * Every value decoded here is checked: no bit is read past the declared byte count, no
 * atom written past the atom count, every integer lies in the frame's integer box, and
 * the size index stays inside the table when a run uses it. A violation raises CorruptFrame with what was
 * wrong; the caller names the file and frame. Positions are integer * (float)(1 / precision)
 * in float32, as GROMACS's reader computes them.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#define XTC_MAGIC 1995
#define SHORT_HEADER 56
#define HEADER 92
#define SMALL_ATOMS 9
/* first usable entry of the size table (the entries before it are 0) */
#define FIRST_INDEX 9
#define MAX_BYTES 12

/* The format's table of radices for the differences inside a run (about 2^(i/3)); part of
 * the format: every writer and reader uses exactly these numbers. */
static const uint32_t SIZE_TABLE[] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0,
    8, 10, 12, 16, 20, 25, 32, 40, 50, 64,
    80, 101, 128, 161, 203, 256, 322, 406, 512, 645,
    812, 1024, 1290, 1625, 2048, 2580, 3250, 4096, 5060, 6501,
    8192, 10321, 13003, 16384, 20642, 26007, 32768, 41285, 52015, 65536,
    82570, 104031, 131072, 165140, 208063, 262144, 330280, 416127, 524287, 660561,
    832255, 1048576, 1321122, 1664510, 2097152, 2642245, 3329021, 4194304, 5284491, 6658042,
    8388607, 10568983, 13316085, 16777216};
#define TABLE_LENGTH ((int)(sizeof(SIZE_TABLE) / sizeof(SIZE_TABLE[0])))

static PyObject *CorruptFrame;

/* ------------------------------------------------------------------ bit input */

typedef struct {
    const uint8_t *data;
    size_t size;   /* bytes the frame declares */
    size_t next;   /* next byte to load */
    uint64_t held; /* loaded bits; the lowest `count` of them are unread */
    int count;
} BitReader;

/* Read n <= 32 bits (most significant first) into *value; 0, or -1 past the declared bytes. */
static inline int take_bits(BitReader *in, int n, uint32_t *value)
{
    while (in->count < n) {
        if (in->next >= in->size)
            return -1;
        in->held = (in->held << 8) | in->data[in->next++];
        in->count += 8;
    }
    in->count -= n;
    *value = (uint32_t)((in->held >> in->count) & (((uint64_t)1 << n) - 1));
    return 0;
}

static inline uint32_t swap_bytes32(uint32_t v)
{
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

/* A number of `bits` bits whose bytes come least significant first, each byte (and the
 * final partial byte) most significant bit first; into bytes[] (little-endian), with its
 * byte count in *length. */
static int take_number(BitReader *in, int bits, uint8_t bytes[MAX_BYTES], int *length)
{
    int filled = 0;
    uint32_t v;
    while (bits >= 32) {
        if (take_bits(in, 32, &v))
            return -1;
        bytes[filled++] = (uint8_t)(v >> 24);
        bytes[filled++] = (uint8_t)(v >> 16);
        bytes[filled++] = (uint8_t)(v >> 8);
        bytes[filled++] = (uint8_t)v;
        bits -= 32;
    }
    while (bits >= 8) {
        if (take_bits(in, 8, &v))
            return -1;
        bytes[filled++] = (uint8_t)v;
        bits -= 8;
    }
    if (bits > 0) {
        if (take_bits(in, bits, &v))
            return -1;
        bytes[filled++] = (uint8_t)v;
    }
    *length = filled;
    return 0;
}

/* Split a number into three digits of radices (r0, r1, r2), r2 least significant; -1 when
 * the leading digit is not below r0 (a stream no writer makes). */
static int split_digits(BitReader *in, int bits, const uint32_t radix[3], int64_t digit[3], int *truncated)
{
    uint8_t bytes[MAX_BYTES];
    int length, i, j;
    *truncated = 0;
    if (bits <= 64) {
        uint64_t number = 0;
        int shift = 0, left = bits;
        uint32_t v;
        while (left >= 32) {
            if (take_bits(in, 32, &v)) {
                *truncated = 1;
                return -1;
            }
            number |= (uint64_t)swap_bytes32(v) << shift;
            shift += 32;
            left -= 32;
        }
        while (left >= 8) {
            if (take_bits(in, 8, &v)) {
                *truncated = 1;
                return -1;
            }
            number |= (uint64_t)v << shift;
            shift += 8;
            left -= 8;
        }
        if (left > 0) {
            if (take_bits(in, left, &v)) {
                *truncated = 1;
                return -1;
            }
            number |= (uint64_t)v << shift;
        }
        digit[2] = (int64_t)(number % radix[2]);
        number /= radix[2];
        digit[1] = (int64_t)(number % radix[1]);
        number /= radix[1];
        if (number >= radix[0])
            return -1;
        digit[0] = (int64_t)number;
        return 0;
    }
    /* up to 72 bits: long division of the little-endian bytes by each radix */
    if (take_number(in, bits, bytes, &length)) {
        *truncated = 1;
        return -1;
    }
    for (i = 2; i >= 1; i--) {
        uint64_t rest = 0;
        for (j = length - 1; j >= 0; j--) {
            rest = (rest << 8) | bytes[j];
            bytes[j] = (uint8_t)(rest / radix[i]);
            rest %= radix[i];
        }
        digit[i] = (int64_t)rest;
    }
    {
        uint64_t lead = 0;
        for (j = length - 1; j >= 0; j--) {
            if (lead >> 56)
                return -1;
            lead = (lead << 8) | bytes[j];
        }
        if (lead >= radix[0])
            return -1;
        digit[0] = (int64_t)lead;
    }
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static inline uint32_t read_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline float read_be_float(const uint8_t *p)
{
    uint32_t bits = read_be32(p);
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/* Smallest n with 2^n > value. */
static int bit_length(uint64_t value)
{
    int n = 0;
    while (value) {
        n++;
        value >>= 1;
    }
    return n;
}

/* bit_length(a * b * c) for a, b, c < 2^24 (a product of up to 72 bits). */
static int bit_length_product(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t ab = a * b; /* < 2^48 */
    uint64_t high = (ab >> 24) * c, low = (ab & 0xffffffu) * c;
    uint64_t above = high + (low >> 24); /* the product >> 24 */
    if (above)
        return 24 + bit_length(above);
    return bit_length(low);
}

static PyObject *corrupt(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyErr_FormatV(CorruptFrame, format, args);
    va_end(args);
    return NULL;
}

static const char AXES[] = "xyz";

/* ------------------------------------------------------------------ decode */

typedef struct {
    float *positions;
    int32_t *integers; /* or NULL */
    float scale;
    Py_ssize_t written; /* atoms */
    char message[320];  /* what is wrong with a damaged frame */
} Output;

/* Record what is wrong (decoding runs without the GIL: no Python call); returns -1. */
static int fail(Output *out, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(out->message, sizeof out->message, format, args);
    va_end(args);
    return -1;
}

static inline void emit(Output *out, const int64_t c[3])
{
    float *p = out->positions + 3 * out->written;
    p[0] = (float)(int32_t)c[0] * out->scale;
    p[1] = (float)(int32_t)c[1] * out->scale;
    p[2] = (float)(int32_t)c[2] * out->scale;
    if (out->integers) {
        int32_t *q = out->integers + 3 * out->written;
        q[0] = (int32_t)c[0];
        q[1] = (int32_t)c[1];
        q[2] = (int32_t)c[2];
    }
    out->written++;
}

static int decode_compressed(const uint8_t *frame, Py_ssize_t length, Py_ssize_t n_atoms, Output *out)
{
    float precision = read_be_float(frame + 56);
    int64_t low[3], high[3];
    uint32_t size[3];
    int k, bits_each[3], packed_bits, index, run = 0;
    uint32_t count;
    Py_ssize_t atom = 0;
    BitReader in;

    if (!(isfinite(precision) && precision > 0))
        return fail(out, "precision %g is not a positive number", (double)precision);
    out->scale = (float)(1.0 / (double)precision);
    for (k = 0; k < 3; k++) {
        low[k] = (int32_t)read_be32(frame + 60 + 4 * k);
        high[k] = (int32_t)read_be32(frame + 72 + 4 * k);
        if (high[k] < low[k] || high[k] - low[k] + 1 > 0xffffffffLL)
            return fail(out, "integer box of %c is [%lld, %lld]", AXES[k], (long long)low[k], (long long)high[k]);
        size[k] = (uint32_t)(high[k] - low[k] + 1);
        bits_each[k] = bit_length(size[k]);
    }
    packed_bits = 0;
    if (size[0] <= 0xffffff && size[1] <= 0xffffff && size[2] <= 0xffffff)
        packed_bits = bit_length_product(size[0], size[1], size[2]);
    /* one past the table is a state writers reach (coordinates more than 2^24 units apart),
     * harmless while no run uses it */
    index = (int32_t)read_be32(frame + 84);
    if (index < FIRST_INDEX || index > TABLE_LENGTH)
        return fail(out, "size index %d is outside the format's table (%d to %d)", index, FIRST_INDEX, TABLE_LENGTH - 1);
    count = read_be32(frame + 88);
    if ((uint64_t)HEADER + (((uint64_t)count + 3) & ~(uint64_t)3) != (uint64_t)length)
        return fail(out, "it declares %u bytes of coordinates but the frame holds %lld", count,
                       (long long)(length - HEADER));
    in.data = frame + HEADER;
    in.size = count;
    in.next = 0;
    in.held = 0;
    in.count = 0;

    while (atom < n_atoms) {
        int64_t first[3], previous[3], current[3];
        uint32_t flag, v;
        int change = 0, truncated = 0, n_run, r;
        if (packed_bits) {
            if (split_digits(&in, packed_bits, size, first, &truncated)) {
                if (truncated)
                    goto ended;
                return fail(out, "atom %zd lies outside the frame's integer box", atom);
            }
        } else {
            for (k = 0; k < 3; k++) {
                if (take_bits(&in, bits_each[k], &v))
                    goto ended;
                if (v >= size[k])
                    return fail(out, "atom %zd lies outside the frame's integer box (%c)", atom, AXES[k]);
                first[k] = v;
            }
        }
        for (k = 0; k < 3; k++)
            first[k] += low[k];
        if (take_bits(&in, 1, &flag))
            goto ended;
        if (flag) {
            uint32_t code;
            if (take_bits(&in, 5, &code))
                goto ended;
            change = (int)(code % 3) - 1;
            run = (int)(code - code % 3);
        }
        n_run = run / 3;
        if (n_run > 0) {
            uint32_t radix[3];
            int64_t half, delta[3];
            if (atom + 1 + n_run > n_atoms)
                return fail(out, "a run of %d atoms after atom %zd passes the %zd atoms of the header", n_run, atom,
                               n_atoms);
            if (index >= TABLE_LENGTH)
                return fail(out, "a run after atom %zd uses size index %d, one past the format's table: its "
                               "writer read past the table, so the run's values are undefined", atom, index);
            radix[0] = radix[1] = radix[2] = SIZE_TABLE[index];
            half = SIZE_TABLE[index] / 2;
            memcpy(previous, first, sizeof previous);
            for (r = 0; r < n_run; r++) {
                if (split_digits(&in, index, radix, delta, &truncated)) {
                    if (truncated)
                        goto ended;
                    return fail(out, "atom %zd: a difference to the previous atom is out of range", atom + 1 + r);
                }
                for (k = 0; k < 3; k++) {
                    current[k] = previous[k] + delta[k] - half;
                    if (current[k] < low[k] || current[k] > high[k])
                        return fail(out, "atom %zd lies outside the frame's integer box (%c = %lld, box [%lld, %lld])",
                                       atom + 1 + r, AXES[k], (long long)current[k], (long long)low[k],
                                       (long long)high[k]);
                }
                emit(out, current);
                if (r == 0)
                    emit(out, first);
                memcpy(previous, current, sizeof previous);
            }
            atom += 1 + n_run;
        } else {
            emit(out, first);
            atom += 1;
        }
        index += change;
        if (index < FIRST_INDEX || index > TABLE_LENGTH)
            return fail(out, "after atom %zd the size index leaves the format's table (%d)", atom - 1, index);
    }
    /* a writer counts the bytes it filled, the last one padded with zero bits */
    if (in.next != in.size || in.count >= 8 || (in.held & (((uint64_t)1 << in.count) - 1)))
        return fail(out, "the %zd atoms end after %zu of the %u bytes of coordinates", n_atoms,
                       in.next - (size_t)(in.count / 8), count);
    return 0;
ended:
    return fail(out, "the %u bytes of coordinates end after %zd of %zd atoms", count, atom, n_atoms);
}

static int writable_buffer(PyObject *object, Py_buffer *view, const char *name, const char *codes)
{
    if (PyObject_GetBuffer(object, view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != 4 || view->format == NULL || strlen(view->format) != 1 ||
        strchr(codes, view->format[0]) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous array of 4-byte %s", name,
                     codes[0] == 'f' ? "floats" : "integers");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *decode_frame(PyObject *module, PyObject *args)
{
    PyObject *frame_object, *positions_object, *integers_object = Py_None, *result = NULL;
    Py_buffer frame, positions, integers;
    const uint8_t *data;
    Py_ssize_t n_atoms, i;
    Output out;
    int have_integers;

    (void)module;
    if (!PyArg_ParseTuple(args, "OO|O:decode_frame", &frame_object, &positions_object, &integers_object))
        return NULL;
    have_integers = integers_object != Py_None;
    if (PyObject_GetBuffer(frame_object, &frame, PyBUF_SIMPLE) < 0)
        return NULL;
    if (writable_buffer(positions_object, &positions, "positions", "f") < 0) {
        PyBuffer_Release(&frame);
        return NULL;
    }
    if (have_integers && writable_buffer(integers_object, &integers, "integers", "il") < 0) {
        PyBuffer_Release(&positions);
        PyBuffer_Release(&frame);
        return NULL;
    }
    data = (const uint8_t *)frame.buf;
    if (have_integers && integers.len != positions.len) {
        PyErr_SetString(PyExc_ValueError, "integers must have the shape of positions");
        goto done;
    }
    if (frame.len < SHORT_HEADER) {
        corrupt("%zd bytes, shorter than a frame header", frame.len);
        goto done;
    }
    if (read_be32(data) != XTC_MAGIC) {
        corrupt("magic number %d, expected %d", (int32_t)read_be32(data), XTC_MAGIC);
        goto done;
    }
    n_atoms = (int32_t)read_be32(data + 4);
    if (n_atoms < 1 || (int32_t)read_be32(data + 52) != n_atoms) {
        corrupt("atom counts %d and %d in the header", (int32_t)read_be32(data + 4), (int32_t)read_be32(data + 52));
        goto done;
    }
    if (positions.len != 12 * n_atoms) {
        PyErr_Format(PyExc_ValueError, "positions hold %zd values, the frame has %zd atoms", positions.len / 4,
                     n_atoms);
        goto done;
    }
    out.positions = (float *)positions.buf;
    out.integers = have_integers ? (int32_t *)integers.buf : NULL;
    out.written = 0;
    if (n_atoms <= SMALL_ATOMS) {
        if (have_integers) {
            PyErr_SetString(PyExc_ValueError, "frames of up to 9 atoms store floats, not integers");
            goto done;
        }
        if (frame.len != SHORT_HEADER + 12 * n_atoms) {
            corrupt("%zd bytes where %zd atoms take %zd", frame.len, n_atoms, SHORT_HEADER + 12 * n_atoms);
            goto done;
        }
        for (i = 0; i < 3 * n_atoms; i++)
            out.positions[i] = read_be_float(data + SHORT_HEADER + 4 * i);
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (frame.len < HEADER) {
        corrupt("%zd bytes, shorter than the header of a compressed frame", frame.len);
        goto done;
    }
    {
        int status;
        /* the buffers stay exported (bytearray and numpy refuse to resize them meanwhile) */
        Py_BEGIN_ALLOW_THREADS
        status = decode_compressed(data, frame.len, n_atoms, &out);
        Py_END_ALLOW_THREADS
        if (status == 0) {
            result = Py_None;
            Py_INCREF(result);
        } else {
            PyErr_SetString(CorruptFrame, out.message);
        }
    }
done:
    if (have_integers)
        PyBuffer_Release(&integers);
    PyBuffer_Release(&positions);
    PyBuffer_Release(&frame);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_frame", decode_frame, METH_VARARGS,
     "decode_frame(frame, positions, integers=None)\n--\n\n"
     "Decode one XTC frame (its bytes, header included) into *positions* (float32, n_atoms x 3)\n"
     "and, for a compressed frame, its grid integers into *integers* (int32, same shape).\n"
     "Raises CorruptFrame when the frame is not a valid XTC frame."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, "_xtcframe",
                                               "Bounds-checked decoding of GROMACS XTC frames.", -1, methods};

PyMODINIT_FUNC PyInit__xtcframe(void)
{
    PyObject *module = PyModule_Create(&module_definition);
    if (module == NULL)
        return NULL;
    CorruptFrame = PyErr_NewExceptionWithDoc("h5mdtool.formats._xtcframe.CorruptFrame",
                                             "An XTC frame that is not a valid encoding of its header's atoms.",
                                             PyExc_ValueError, NULL);
    if (CorruptFrame == NULL || PyModule_AddObject(module, "CorruptFrame", CorruptFrame) < 0) {
        Py_XDECREF(CorruptFrame);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(CorruptFrame);
    return module;
}
