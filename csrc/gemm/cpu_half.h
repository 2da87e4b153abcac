/* cpu_half.h: float16 and bfloat16 to and from float32 on the host, with the bits kernels/dtype.h gives on a
 * device (round to nearest even; inf kept; NaN kept a NaN: bfloat16 as sign | 0x7fc0, float16 with the top of
 * its payload, quieted where F16C converts). For the native commands of CPU devices: the BLAS path's half operands (cpu_blas.c) and the scales
 * of the quantized blocks (cpu_quant.c). F16C where the CPU has it, plain C elsewhere. */
#ifndef TL_CPU_HALF_H
#define TL_CPU_HALF_H
#include <stddef.h>
#include <stdint.h>

float tl_half_to_float(uint16_t h);                              /* IEEE binary16, subnormals included */
void  tl_cpu_widen(int dt, const void *src, float *dst, size_t n);   /* dt: TL_F16 or TL_BF16 (tensor.h) */
void  tl_cpu_narrow(int dt, const float *src, void *dst, size_t n);
#endif
