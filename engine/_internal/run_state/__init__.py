"""What describes and records one run: the ``RunSpec`` the controller is handed
(``spec``), the versioned run record (``record``), the lease that gives a run one owner
(``lease``) and the wall-clock marks kept in the record (``timeline``)."""
