"""Network backends behind one narrow interface."""
