from django.urls import path
from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/<str:order_id>/cancel/", views.cancel_order),
    path("orders/<str:order_id>/", views.order),
]
