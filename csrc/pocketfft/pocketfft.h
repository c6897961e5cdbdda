/*
 * This file is part of pocketfft.
 * Licensed under a 3-clause BSD style license - see LICENSE.md
 *
 * Copyright (C) 2004-2018 Max-Planck-Society
 * \author Martin Reinecke
 *
 * Public interface of the vendored C pocketfft (pocketfft.c, from NumPy 1.26.4).
 * Complex transforms work on interleaved (re, im) arrays of `length` complex values;
 * real transforms use the FFTPACK "halfcomplex" order r0, r1, i1, r2, i2, ... (r_{n/2} last
 * for even n).  Forward = exp(-2 pi i jk/n); fct scales the result.  The transforms return
 * 0 on success and -1 when their scratch allocation fails.
 */
#ifndef VP_POCKETFFT_H
#define VP_POCKETFFT_H
#include <stddef.h>

struct cfft_plan_i;
typedef struct cfft_plan_i *cfft_plan;
struct rfft_plan_i;
typedef struct rfft_plan_i *rfft_plan;

cfft_plan make_cfft_plan(size_t length);          /* NULL when out of memory */
void destroy_cfft_plan(cfft_plan plan);
int cfft_backward(cfft_plan plan, double c[], double fct);
int cfft_forward(cfft_plan plan, double c[], double fct);

rfft_plan make_rfft_plan(size_t length);          /* NULL when out of memory */
void destroy_rfft_plan(rfft_plan plan);
int rfft_backward(rfft_plan plan, double c[], double fct);
int rfft_forward(rfft_plan plan, double c[], double fct);

size_t good_size(size_t n); /* smallest 2^a 3^b 5^c 7^d 11^e >= n */
#endif
