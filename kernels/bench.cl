/* bench.cl: reference kernels that benchmarks compare tlgpu against, measured in the same run. */
kernel void
tl_bench_copy_f32(int n, global float *o, global const float *a)
{
    int gid = get_global_id(0);
    if (gid < n) o[gid] = a[gid];
}
