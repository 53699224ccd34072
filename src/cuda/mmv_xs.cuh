/* mmv_xs.cuh - the x-stationary GEMVs fed from registers: xs (each lane's activations
 * held in registers for every row it visits, the weights double-buffered in registers)
 * and xs2 (each row split between the two warps of a pair, for rows xs cannot hold);
 * mmv_xs_upl and mmv_xs2_upl say which rows each takes. Their forms fed by a TMA ring
 * are in mmv_xst.cuh; the lane's units they share with those, in mmv_core.cuh. */
#ifndef MINFER_CUDA_MMV_XS_CUH
#define MINFER_CUDA_MMV_XS_CUH

#include "mmv_core.cuh"

/* ---- Variant "xs" (x-stationary persistent warps) ----
 * Counting the L1 traffic of v1 per q4_K row of 4096: 2.3 KB of weights, but each
 * lane also reads its 64 activations as four 16-byte loads 64 bytes apart (25% of
 * every 128-byte line used), about 190 L1 wavefronts per row in all, which caps
 * the SM at ~3.2 TB/s before anything else. Here the grid is persistent (what fits
 * at once) and lane l of a warp always takes the same units l, l+32, ... of every
 * row it visits, so it loads its activations (U::X) once per kernel into registers
 * and then only streams weights: warp g takes rows g, g+W, g+2W, ... (W = all
 * warps; the machine reads one contiguous band of rows at a time) and keeps the
 * next row's weights in flight in a second register set while it reduces the
 * current one. UPL = units per lane (a row has at most 32*UPL units); the sums are
 * v1's in v1's order, so the results are bit-identical. One column only. */
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs_load(const cu_mmv_args &a, int g, int nb, int nu, int lane,
                                                   typename U::W *w) {
    int m, r;
    mmv_lane_load<U, UPL, ld_g>(mmv_row(a, g, &m, &r), nb, 0, nu, lane, w);
}

template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_xs(cu_mmv_args a) {
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * MMV_WARPS + (threadIdx.x >> 5);
    const int W = gridDim.x * MMV_WARPS;
    const int total = mmv_total(a);
    if (gw >= total) return;
    const int n = (total - gw + W - 1) / W;
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::W A[UPL], B[UPL];
    mmv_xs_load<U, UPL>(a, gw, nb, nu, lane, A);  /* weights: before the wait */
    pdl_wait();
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    mmv_keep keep;
    for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) mmv_xs_load<U, UPL>(a, gw + (i + 1) * W, nb, nu, lane, B);
        keep.put(a, i, n, gw, W, lane, warp_sum(mmv_lane_dot<U, UPL>(A, x, 0, nu, lane)));
        if (i + 1 >= n) break;
        if (i + 2 < n) mmv_xs_load<U, UPL>(a, gw + (i + 2) * W, nb, nu, lane, A);
        keep.put(a, i + 1, n, gw, W, lane, warp_sum(mmv_lane_dot<U, UPL>(B, x, 0, nu, lane)));
    }
    trace_end();
}

template <typename U, int UPL>
static int mmv_xs_occupancy() {
    static int per_sm;
    if (!per_sm) per_sm = mmv_occupancy(kernel_mmv_xs<U, UPL>, MMV_WARPS * 32);
    return per_sm;
}
template <typename U>
static void mmv_xs_prepare() {
    mmv_xs_occupancy<U, 1>();
    mmv_xs_occupancy<U, 2>();
    mmv_xs_occupancy<U, 4>();
}
/* Units per lane the xs kernel is built for (0: v1 takes the launch). */
static inline int mmv_xs_upl(int nu, int ncols) {
    if (ncols != 1) return 0;
    return nu <= 32 ? 1 : nu <= 64 ? 2 : nu <= 128 ? 4 : 0;
}
template <typename U, int UPL>
static void mmv_xs_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    const int blocks = mmv_persist_blocks(S, a, MMV_WARPS, mmv_xs_occupancy<U, UPL>(), per_sm_cap);
    cu_launch(S, name, kernel_mmv_xs<U, UPL>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

/* ---- Schedule "xs2" (rows of 129..256 units, e.g. the 11008-wide
 * ffn_down, which xs cannot hold, where 3 of its blocks fit per SM and path wide-ring is off) ----
 * xs with a row split between the two warps of a pair: warp h of the pair holds the
 * activations of units [h*hu, h*hu + hu) (hu = half the row, rounded up) for every
 * row it visits and streams those weights (double-buffered); the pair meets on a
 * named barrier per row, where warp 0 adds warp 1's partial (through shared memory,
 * two slots used in turn) and writes the row. Not bit-identical to v1 (two partial
 * sums per row). One column. */
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs2_load(const cu_mmv_args &a, int g, int nb, int u0, int nh, int lane,
                                                    typename U::W *w) {
    int m, r;
    mmv_lane_load<U, UPL, ld_g>(mmv_row(a, g, &m, &r), nb, u0, nh, lane, w);
}
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs2_row(const cu_mmv_args &a, int g, int i, int u0, int nh, int lane,
                                                   int half, int pair, float (*part)[2],
                                                   const typename U::W *w, const typename U::X *x) {
    const float acc = warp_sum(mmv_lane_dot<U, UPL>(w, x, u0, nh, lane));
    if (half == 1 && lane == 0) part[pair][i & 1] = acc;
    asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
    if (half == 0 && lane == 0) {
        int m, r;
        mmv_row(a, g, &m, &r);
        const float v = acc + part[pair][i & 1];
        mmv_store<1>(a, m, r, &v);
    }
}

template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_xs2(cu_mmv_args a) {
    __shared__ float part[MMV_WARPS / 2][2];
    pdl_trigger();
    const mmv_pair_warp<MMV_WARPS> pw(a);
    if (pw.idle()) return;
    const int lane = pw.lane, half = pw.half, pair = pw.pair, gp = pw.gp, P = pw.P, n = pw.rows();
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    const int hu = (nu + 1) / 2;
    const int u0 = half * hu, nh = half ? nu - hu : hu;
    typename U::W A[UPL], B[UPL];
    mmv_xs2_load<U, UPL>(a, gp, nb, u0, nh, lane, A);  /* weights: before the wait */
    pdl_wait();
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, u0, nh, lane, x);
    for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) mmv_xs2_load<U, UPL>(a, gp + (i + 1) * P, nb, u0, nh, lane, B);
        mmv_xs2_row<U, UPL>(a, gp + i * P, i, u0, nh, lane, half, pair, part, A, x);
        if (i + 1 >= n) break;
        if (i + 2 < n) mmv_xs2_load<U, UPL>(a, gp + (i + 2) * P, nb, u0, nh, lane, A);
        mmv_xs2_row<U, UPL>(a, gp + (i + 1) * P, i + 1, u0, nh, lane, half, pair, part, B, x);
    }
}

template <typename U, int UPL>
static int mmv_xs2_occupancy() {
    static int per_sm;
    if (!per_sm) per_sm = mmv_occupancy(kernel_mmv_xs2<U, UPL>, MMV_WARPS * 32);
    return per_sm;
}
template <typename U>
static void mmv_xs2_prepare() {
    mmv_xs2_occupancy<U, 3>();
    mmv_xs2_occupancy<U, 4>();
}
/* Units per lane of xs2 for a row of nu units (0: it does not take the row). */
static inline int mmv_xs2_upl(int nu, int ncols) {
    if (ncols != 1 || nu <= 128 || nu > 256) return 0;
    return (nu + 1) / 2 <= 96 ? 3 : 4;
}
template <typename U, int UPL>
static void mmv_xs2_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    const int blocks = mmv_persist_blocks(S, a, MMV_WARPS / 2, mmv_xs2_occupancy<U, UPL>(), per_sm_cap);
    cu_launch(S, name, kernel_mmv_xs2<U, UPL>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

#endif
