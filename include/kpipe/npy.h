/* kpipe .npy files: NumPy's array format (versions 1.0 to 3.0) for a
 * tensor's host data, C order, little-endian or one-byte dtypes.
 *
 *   kp_tensor_desc d;  void *data;  size_t bytes;
 *   if (kp_npy_load("x.npy", &d, &data, &bytes) != KP_OK)   // sizes checked against
 *       fprintf(stderr, "%s\n", kp_last_error());           // the file before allocating
 *   kp_npy_save("y.npy", &d, data);
 *   kp_npy_free(data);
 *
 * The header dictionary is parsed as the format defines it: exactly the keys
 * 'descr', 'fortran_order' and 'shape', each once; anything else is an error
 * that names the file and the byte where reading stopped.
 */
#ifndef KPIPE_NPY_H
#define KPIPE_NPY_H

#include "kpipe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks a whole .npy file image of `len` bytes: the header, and that the
 * data that follows it is exactly as long as the header says. Fills the
 * descriptor (contiguous, offset 0) and where the data starts. */
kp_status kp_npy_parse(const void *buf, size_t len, kp_tensor_desc *desc, size_t *data_offset);
/* Reads a file: the header is checked against the file's size before any
 * data is allocated. *data (free with kp_npy_free) holds *bytes bytes. */
kp_status kp_npy_load(const char *path, kp_tensor_desc *desc, void **data, size_t *bytes);
/* Writes a contiguous tensor's data (format 1.0, or 2.0 for a long header). */
kp_status kp_npy_save(const char *path, const kp_tensor_desc *desc, const void *data);
/* Releases what kp_npy_load returned. NULL is a no-op. */
void kp_npy_free(void *data);

#ifdef __cplusplus
}
#endif
#endif
