/* arg_better.h: the argmax / argmin order of reduce.cl and decode.cl (numpy's: the first NaN wins, ties keep the
 * lower index). */
#ifndef TL_ARG_BETTER_H
#define TL_ARG_BETTER_H
/* Does candidate (vb, ib) replace (va, ia) in an argmax (want_max) or argmin? Index -1 marks an empty lane. */
inline bool
arg_better(int want_max, float va, int ia, float vb, int ib)
{
    if (ib < 0) return false;
    if (ia < 0) return true;
    bool na = isnan(va), nb = isnan(vb);
    if (na || nb) return nb && (!na || ib < ia);
    if (vb != va) return want_max ? vb > va : vb < va;
    return ib < ia;
}

/* (*v, *i) = (v2, i2) when the candidate wins (arg_better). */
inline void
arg_keep(int want_max, float *v, int *i, float v2, int i2)
{
    if (arg_better(want_max, *v, *i, v2, i2)) {
        *v = v2;
        *i = i2;
    }
}
#endif
