/* poisson.c: placeholder until the vortex-in-cell solver lands (issue 5). */
#include "internal.h"
int vp_poisson_velocity_grid(vp_sim *s) { (void)s; return VP_ERR_STATE; }
