/* workspace.c: memory below the phases: the scratch they share, owned by the sim and kept
 * between steps (so that a step allocates nothing in the usual case; one phase uses it at a
 * time), and the growth of the sim's arrays. */
#include <stdlib.h>
#include "internal.h"

/* At least `doubles` doubles of scratch (its contents undefined), or NULL when out of memory. */
double *vp_sim_scratch(vp_sim *s, size_t doubles)
{
    if (doubles > s->scratch_allocated) {
        double *p = realloc(s->scratch, doubles * sizeof(double));
        if (!p) return NULL;
        s->scratch = p; s->scratch_allocated = doubles;
    }
    return s->scratch;
}

/* Room for one more item of `size` bytes in *array (*n items, *n_allocated of them
 * allocated), by doubling; VP_ERR_NOMEM (and the array as it was) when out of memory. */
int vp_array_grow(void **array, size_t n, size_t *n_allocated, size_t size)
{
    if (n < *n_allocated) return VP_OK;
    const size_t na = *n_allocated ? 2 * *n_allocated : 4;
    void *p = realloc(*array, na * size);
    if (!p) return VP_ERR_NOMEM;
    *array = p; *n_allocated = na;
    return VP_OK;
}
