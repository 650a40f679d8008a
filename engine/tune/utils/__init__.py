"""Ray Tune's ``ray.tune.utils`` names that its examples import (``mock_trainable``)."""
