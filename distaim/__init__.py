"""DistAIM: AIM (McKenna et al. 2022) on Shamir-shared marginals held by three MPyC servers."""
